"""`python -m lapilli`: the `lapilli` command line."""

import sys

from lapilli._cli import main

if __name__ == "__main__":  # imported, not run, by tools that walk the package (stubtest)
    sys.exit(main())

"""The `lapilli` command line, installed with the package: the `lapilli` script and
`python -m lapilli` both run the native command line (`lapilli-cli`, linked into the extension)
in this process."""

import signal
import sys

from lapilli._lapilli import _cli_main


def main() -> int:
    # The command runs with the interpreter released, where Python's own Ctrl-C handler would
    # only set a flag nobody reads until it ends (`tail -f` never does): Ctrl-C ends the
    # process, as it ends any command line tool.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    return _cli_main(["lapilli", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())

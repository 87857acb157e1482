import os
import pathlib
import shutil
import subprocess

import pytest

import lapilli

# The suite tests the installed wheel (python/scripts/test.sh); refuse a source checkout.
assert "site-packages" in (lapilli.__file__ or ""), (
    f"lapilli was imported from {lapilli.__file__}, not from an installed wheel"
)


@pytest.fixture(autouse=True)
def _remove_stores_after_each_test(tmp_path):
    """Segments are preallocated (256 MiB by default): a suite of ~200 stores kept around would
    fill a disk, so every test's directory goes as soon as the test ends."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="session")
def append_forever() -> pathlib.Path:
    """The core's `append_forever` example: a Rust writer process for follower tests."""
    root = pathlib.Path(__file__).resolve().parents[2]
    subprocess.run(
        ["cargo", "build", "-q", "--release", "-p", "lapilli-core", "--example", "append_forever"],
        cwd=root,
        check=True,
    )
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    return target / "release" / "examples" / "append_forever"

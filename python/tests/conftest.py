import shutil

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

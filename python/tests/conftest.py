import lapilli

# The suite tests the installed wheel (python/scripts/test.sh); refuse a source checkout.
assert "site-packages" in (lapilli.__file__ or ""), (
    f"lapilli was imported from {lapilli.__file__}, not from an installed wheel"
)

"""pytest_hfexport: a pytest plugin to assert exportability and gate version upgrades."""

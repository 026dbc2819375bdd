"""Plain export of every zoo entry on every selected backend: the artifact, loaded back from disk,
matches eager at the sample shape and at another batch and sequence length."""

import pytest

from conformance.checks import assert_matches, eager_named
from conformance.conftest import entry_params


@pytest.mark.parametrize("entry", entry_params("export"))
def test_plain_export_matches_eager(entry, exported, hfexport_backend):
    result = exported(entry)
    for label, inputs in (("sample", result.sample), ("other", entry.other_inputs(result.model))):
        assert_matches(eager_named(result.model, inputs), result.runner(inputs), hfexport_backend, label)

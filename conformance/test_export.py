"""Plain export of every zoo entry on every selected backend, traced on a batch-1 sample: the artifact,
loaded back from disk, matches eager at the sample, at another length and at one token (``export``), and
at batch 2 with left padding (``export_batch``, its own check: an implementation that pins batch still gets
verdicts on the rest)."""

import pytest

from conformance.conftest import entry_params
from conformance.judge import assert_matches


@pytest.mark.parametrize("entry", entry_params("export"))
def test_plain_export_matches_eager(entry, exported, hfexport_backend):
    result = exported(entry)
    for label, inputs in entry.input_sets(result.model).items():
        assert_matches(result.model, inputs, result.runner, hfexport_backend, f"{label} inputs")


@pytest.mark.parametrize("entry", entry_params("export", key="export_batch"))
def test_plain_export_serves_a_padded_batch(entry, exported, hfexport_backend):
    result = exported(entry)
    inputs = entry.input_sets(result.model, ("batch",))["batch"]
    assert_matches(result.model, inputs, result.runner, hfexport_backend, f"batch {entry.batch}, left-padded")

"""Plain export of every zoo entry on every selected backend, traced on a batch-1 sample: the artifact,
loaded back from disk, matches eager at the sample, at another length and at one token (``export``), and
at batch 2 with left padding (``export_batch``, its own check: an implementation that pins batch still gets
verdicts on the rest). The backend file itself is also run by the backend's own runtime, so a runner that
compensates for its artifact cannot pass a wrong one."""

import pytest

from conformance.conftest import entry_params
from conformance.judge import assert_matches
from pytest_hfexport.backend_runtime import backend_runner


@pytest.mark.parametrize("entry", entry_params("export"))
def test_plain_export_matches_eager(entry, exported, hfexport_backend):
    result = exported(entry)
    for label, inputs in entry.input_sets(result.model).items():
        assert_matches(result.model, inputs, result.runner, hfexport_backend, label, artifact=result.artifact())


@pytest.mark.parametrize("entry", entry_params("export", key="export_batch"))
def test_plain_export_serves_a_padded_batch(entry, exported, hfexport_backend):
    result = exported(entry)
    inputs = entry.input_sets(result.model, ("batch",))["batch"]
    label = f"batch {entry.batch}, left-padded"
    assert_matches(result.model, inputs, result.runner, hfexport_backend, label, artifact=result.artifact())


@pytest.mark.parametrize("entry", entry_params("export"))
def test_backend_runtime_runs_the_artifact(entry, exported, hfexport_backend, hfexport_implementation):
    """The backend file itself, run by the backend's own runtime (not the implementation's runner, which could
    pad, re-trace or fall back to eager), matches eager at every input set (outputs it names as eager does)."""
    result = exported(entry)
    run = backend_runner(hfexport_implementation.raw_artifact(result.paths["model"]), hfexport_backend)
    for label, inputs in entry.input_sets(result.model).items():
        assert_matches(
            result.model, inputs, run, hfexport_backend, label, backend_file=True, artifact=result.artifact()
        )


@pytest.mark.parametrize("entry", entry_params("export", key="export_batch"))
def test_backend_runtime_serves_a_padded_batch(entry, exported, hfexport_backend, hfexport_implementation):
    """The backend file, run by the backend's own runtime, at batch 2 with left padding."""
    result = exported(entry)
    run = backend_runner(hfexport_implementation.raw_artifact(result.paths["model"]), hfexport_backend)
    inputs = entry.input_sets(result.model, ("batch",))["batch"]
    label = f"batch {entry.batch}, left-padded"
    assert_matches(result.model, inputs, run, hfexport_backend, label, backend_file=True, artifact=result.artifact())

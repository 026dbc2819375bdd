"""The plain export's artifact at hypothesis-drawn sequence lengths (batch 1, exported once, run many times).
Lengths are drawn from the entry's own range, not from the ranges the program declares: a program exported
static under dynamic=True fails here."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.conftest import entry_params
from conformance.judge import assert_matches


@pytest.mark.parametrize("entry", entry_params("shapes"))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.data())
def test_artifact_accepts_other_lengths(entry, exported, hfexport_backend, data):
    result = exported(entry)
    seq = data.draw(st.integers(min_value=entry.min_seq, max_value=12), label="seq")
    inputs = entry.sample_inputs(result.model, batch=entry.sample[0], seq=seq)
    assert_matches(result.model, inputs, result.runner, hfexport_backend, f"seq={seq}", artifact=result.artifact())


# Entries whose explicit Dim ranges are checked: a decoder and an encoder, each exported once more for it.
RANGE_ENTRIES = ("llama", "bert")
RANGE_SPAN = 5  # the Dim's max is the sample length plus this


@pytest.mark.parametrize("entry", entry_params("shapes", names=RANGE_ENTRIES))
def test_explicit_dim_ranges_are_honoured(entry, exported, hfexport_backend):
    """``dynamic_shapes`` with an explicit ``Dim(min=2, max=sample+5)`` on the sequence axis go to the export as
    given: the artifact matches eager at both ends of the range and, where the format carries ranges (a
    torch.export program, an ExecuTorch program planned for its upper bound), refuses a length outside it
    instead of running it unverified. An exporter that replaces the ranges by ``Dim.AUTO`` or static shapes
    fails here. ONNX graphs carry no ranges: there, only the two ends are run."""
    import torch

    sample = entry.sample_inputs(entry.model())
    batch, length = sample["input_ids"].shape
    low, high = 2, length + RANGE_SPAN
    seq = torch.export.Dim("seq", min=low, max=high)
    spec = {
        k: {1: seq} for k, v in sample.items() if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[1] == length
    }
    # As the guide configures explicit ranges for LLMs: guards that fail somewhere in the range become run-time asserts.
    result = exported(entry, config={"dynamic_shapes": spec, "prefer_deferred_runtime_asserts_over_guards": True})
    model, runner = result.model, result.runner
    for n in (low, high):
        inputs = entry.sample_inputs(model, batch=batch, seq=n)
        assert_matches(model, inputs, runner, hfexport_backend, f"seq={n}", artifact=result.artifact())
    outside = {"dynamo": (low - 1, high + 1), "executorch": (high + 1,)}.get(hfexport_backend, ())
    for n in outside:
        try:
            runner(**entry.sample_inputs(model, batch=batch, seq=n))
        except Exception:  # refused: any error the runtime raises for a size its program does not allow
            continue
        pytest.fail(
            f"the artifact exported for seq {low}..{high} ran seq={n} without an error: the explicit Dim range was "
            "not honoured (or the runtime does not check it)"
        )

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
    seq = data.draw(st.integers(min_value=1 if entry.one_token else 2, max_value=12), label="seq")
    inputs = entry.sample_inputs(result.model, batch=entry.sample[0], seq=seq)
    assert_matches(result.model, inputs, result.runner, hfexport_backend, f"seq={seq}")

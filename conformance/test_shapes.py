"""The same artifact at hypothesis-drawn batch and sequence sizes: exported once, run many times."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conformance.checks import assert_matches, eager_named
from conformance.conftest import entry_params


@pytest.mark.parametrize("entry", entry_params("shapes"))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(batch=st.integers(min_value=1, max_value=3), seq=st.integers(min_value=2, max_value=12))
def test_artifact_accepts_other_shapes(entry, exported, hfexport_backend, batch, seq):
    result = exported(entry)
    inputs = entry.sample_inputs(result.model, batch=batch, seq=seq)
    assert_matches(eager_named(result.model, inputs), result.runner(inputs), hfexport_backend, f"batch={batch} seq={seq}")

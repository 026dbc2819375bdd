"""Multi-token decode: export_for_generation(multi_token_decode=True) yields one decode graph whose
query axis stays symbolic; it must match eager with 1 query token (plain decoding) and with 3
(a block of accepted speculative tokens) on top of the same cache."""

import copy

import pytest
import torch

from conformance.checks import assert_matches, eager_named
from conformance.conftest import entry_params
from hfexport.dynamo import tensor_inputs
from hfexport.generation import _clean, capture_generation_calls, merge_decode_calls


def decode_call(model, inputs, tokens: int) -> dict:
    """Eager kwargs of one decode call that feeds ``tokens`` query tokens on the prompt's cache."""
    calls = capture_generation_calls(model, inputs, new_tokens=tokens + 1)
    steps = calls["model"][1:1 + tokens]
    mask = inputs.get("attention_mask") if isinstance(inputs.get("attention_mask"), torch.Tensor) else None
    return _clean(steps[0] if tokens == 1 else merge_decode_calls(steps, mask))


@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("entry", entry_params("multi_token_decode"))
def test_one_decode_graph_serves_k_query_tokens(entry, tokens, generation_exported, hfexport_backend):
    result = generation_exported(entry, multi_token_decode=True)
    kwargs = decode_call(result.model, result.inputs, tokens)
    graph_inputs = tensor_inputs(kwargs)
    got = result.runners["decode"](copy.deepcopy(graph_inputs))
    assert_matches(eager_named(result.model, kwargs), got, hfexport_backend, f"decode with {tokens} query token(s)")

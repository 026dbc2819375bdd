"""Multi-token decode: export_for_generation(multi_token_decode=True) yields one decode graph whose query
axis stays symbolic. It must match eager with 1 query token (plain decoding) and with 3 (a block of accepted
speculative tokens) on the prompt's cache, at the sample prompt and at another prompt length
(``multi_token_decode``), and at batch 2 with left padding (``multi_token_decode_batch``). The 3-token
reference is one eager call, checked first against eager's own three single steps; an entry whose eager
model cannot serve 3 tokens in one call (mamba) is judged on 1 token only (``ZooEntry.query_tokens``)."""

import pytest

from conformance.conftest import case
from conformance.judge import assert_matches
from conformance.zoo import select
from pytest_hfexport.reference import decode_block_calls


def block_params(key: str) -> list:
    return [
        case(entry, key, id=f"{entry.name}-{k}", values=(entry, k))
        for entry in select(check="multi_token_decode")
        for k in entry.query_tokens
    ]


def check_decode(result, kinds, tokens, backend):
    inputs_by_kind = result.entry.input_sets(result.model, kinds)
    for label, call in decode_block_calls(result.model, inputs_by_kind, (tokens,)):
        assert_matches(result.model, call, result.runners["decode"], backend, label, artifact=result.artifact("decode"))


@pytest.mark.parametrize("entry,tokens", block_params("multi_token_decode"))
def test_one_decode_graph_serves_k_query_tokens(entry, tokens, exported, hfexport_implementation, hfexport_backend):
    hfexport_implementation.require("multi_token_decode", hfexport_backend)
    check_decode(
        exported(entry, generation=True, multi_token_decode=True), ("sample", "other"), tokens, hfexport_backend
    )


@pytest.mark.parametrize("entry,tokens", block_params("multi_token_decode_batch"))
def test_decode_graph_serves_a_padded_batch(entry, tokens, exported, hfexport_implementation, hfexport_backend):
    hfexport_implementation.require("multi_token_decode", hfexport_backend)
    check_decode(exported(entry, generation=True, multi_token_decode=True), ("batch",), tokens, hfexport_backend)

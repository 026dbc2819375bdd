"""Every static-cache decode graph takes the documented bool 4D mask, eager attention included.

transformers gives eager attention an additive float mask; a graph exported with it took a float mask, and a
caller's bool mask (the documented loop) was added to the scores as 0 or 1: gemma2's decode graph was 0.35 off
eager, silently. The graph now takes bool and makes the additive form inside (``patching.sliding_window``).
"""

import torch
import transformers

from hfexport import DynamoConfig, DynamoExporter
from hfexport.patching import sliding_window
from hfexport.runtime.decode import causal_mask, decode_loop

from helpers import tiny_llama


def _eager_static_decode():
    model, sample = tiny_llama()
    model.set_attn_implementation("eager")
    sample = {k: v[:1] for k, v in sample.items()}
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=16)
    programs = DynamoExporter().export_for_generation(model, sample, DynamoConfig(dynamic=True), generation)
    return model, sample, programs["decode"]


def _prompt_error(model, sample, program) -> float:
    loop = decode_loop(program, "dynamo")
    ids = sample["input_ids"]
    positions = torch.arange(ids.shape[1])
    loop.reset()
    logits = loop.step(ids, causal_mask(positions, loop.max_cache_len, torch.bool), positions[None])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    return float((logits - expected).abs().max())


def test_an_eager_attention_decode_graph_takes_a_bool_mask_and_matches_eager():
    model, sample, program = _eager_static_decode()
    assert program.example_inputs[1]["attention_mask"].dtype == torch.bool
    assert _prompt_error(model, sample, program) < 2e-6


def test_without_the_conversion_the_bool_mask_is_added_to_the_scores(monkeypatch):
    """The fault: the bool mask reaches eager attention as it is."""
    monkeypatch.setattr(sliding_window, "additive_where_eager", lambda mask, config, dtype: mask)
    model, sample, program = _eager_static_decode()
    assert _prompt_error(model, sample, program) > 1e-3

"""A static-cache prefill takes the mask generate() gives it, also as ``{'full_attention': None}``.

generate() hands a model with ``layer_types`` (qwen3) a mapping per layer type whose entries are None where the
attention is plain causal. Exported as a constant, that mapping left the prefill graph with no mask input and a
different attention: logits 0.13 off eager's on the sample. The export now treats it as no mask and passes the
explicit padding mask a caller passes, as it does for llama, whose generate() passes None.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GenerationConfig

from conformance.zoo import entries  # noqa: F401  (registers the zoo)
from conformance.zoo.registry import get
from hfexport import DynamoConfig, DynamoExporter, decode_calls
from hfexport.generation import capture_generation_calls

STATIC = GenerationConfig(cache_implementation="static", max_cache_len=32)


def prefill_error(name: str) -> tuple[list[str], float]:
    entry = get(name)
    model = entry.model()
    inputs = entry.sample_inputs(model)
    program = DynamoExporter().export_for_generation(
        model, inputs, config=DynamoConfig(dynamic=True), generation_config=STATIC, multi_token_decode=True
    )["prefill"]
    call = capture_generation_calls(model, inputs, STATIC, 2)["model"][0]
    taken = list(program.example_inputs[1])
    served = decode_calls.explicit_mask(copy.deepcopy(call), accepts_mask=True)
    with torch.no_grad():
        eager = model(**copy.deepcopy(call)).logits[:, -1]
        exported = program.module()(**{k: v for k, v in served.items() if k in taken})["logits"][:, -1]
    return taken, float((exported - eager).abs().max())


@pytest.mark.parametrize("name", ["qwen3", "llama"])
def test_static_prefill_takes_the_mask_and_matches_eager_on_generates_call(name):
    taken, error = prefill_error(name)
    assert "attention_mask" in taken
    assert error < 1e-5, f"{name}: the static prefill's last logits are {error:.2e} off eager's on generate()'s call"


def test_a_mapping_of_none_dropped_as_a_constant_is_caught(monkeypatch):
    """The fault this guards against: the per-layer-type mapping kept as given."""
    monkeypatch.setattr(decode_calls, "_no_mask", lambda mask: mask is None)
    taken, error = prefill_error("qwen3")
    assert "attention_mask" not in taken and error > 1e-2


def served_tokens(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """8 greedy tokens of generate() with both static components served by their Dynamo programs, and eager's."""
    from hfexport.runtime import runner_for
    from hfexport.runtime.components import ExportedGenerate
    from hfexport.utils import decompose_for_generation

    entry = get(name)
    model = entry.model()
    inputs = entry.sample_inputs(model)
    components = decompose_for_generation(model, inputs, generation_config=STATIC, multi_token_decode=True)
    programs = DynamoExporter().export_for_generation(
        model, inputs, config=DynamoConfig(dynamic=True), generation_config=STATIC, multi_token_decode=True
    )
    runners = {k: runner_for(p, "dynamo") for k, p in programs.items()}
    served = ExportedGenerate(model, components, runners).generate(inputs, 8, generation_config=STATIC)
    config = GenerationConfig(cache_implementation="static", max_cache_len=32, max_new_tokens=8, do_sample=False)
    with torch.no_grad():
        eager = model.generate(**copy.deepcopy(inputs), generation_config=config)[:, -8:]
    return served, eager


@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_generate_served_by_the_static_components_gives_eagers_tokens(name):
    """generate() passes the static decode graph a mapping per layer type; served, it gets the one mask. gemma3's
    generate() built a StaticCache whose sliding layers hold only the window (a guard failure on the mask); served,
    it builds the cache with every slot, the layout the graphs were traced with."""
    served, eager = served_tokens(name)
    assert torch.equal(served, eager)


def test_a_cache_holding_only_the_window_is_refused_naming_what_to_pass():
    """generate()'s own StaticCache for a sliding-window model, handed to the static prefill's runner as the cache
    object: refused before it runs (it raised a guard failure, and ONNX Runtime a broadcast error), naming the
    cache that fits."""
    from hfexport.errors import RunnerInputError
    from hfexport.runtime import runner_for

    entry = get("gemma3")
    model = entry.model()
    inputs = entry.sample_inputs(model)
    program = DynamoExporter().export_for_generation(
        model, inputs, config=DynamoConfig(dynamic=True), generation_config=STATIC, multi_token_decode=True
    )["prefill"]
    from pytest_hfexport.reference import capture_generation  # generate() as transformers runs it, unpatched

    call = capture_generation(model, inputs, 2, STATIC).call("prefill")
    served = decode_calls.explicit_mask(copy.deepcopy(call), accepts_mask=True)
    taken = list(program.example_inputs[1])
    with pytest.raises(RunnerInputError, match=r"holds only a sliding window in layers .*apply_patches\('generation'\)"):
        runner_for(program, "dynamo")(**{k: v for k, v in served.items() if k in taken})


def test_serving_the_mapping_as_it_comes_is_refused(monkeypatch):
    """The fault: generate()'s mapping handed to the graph as it is. The runner refuses it, naming the inputs."""
    from hfexport.errors import RunnerInputError
    from hfexport.runtime import components

    monkeypatch.setattr(components, "one_static_mask", lambda call: call)
    with pytest.raises(RunnerInputError, match="attention_mask.full_attention"):
        served_tokens("qwen3")

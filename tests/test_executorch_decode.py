"""ExecuTorch static-cache decoding: the Python loop, the program-owned cache, the C++ zero-copy loop, the cache's
bounds and its in-place update kept alive to the end of the plan."""

from __future__ import annotations

import dataclasses
import functools

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

pytest.importorskip("executorch")

from conformance.zoo import get  # noqa: E402
from hfexport import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.errors import HfExportError, RunnerInputError  # noqa: E402
from hfexport.tracing import Trace  # noqa: E402
from hfexport.model_state import diff_model_state, snapshot_model  # noqa: E402
from hfexport.outputs import flatten_named  # noqa: E402
from hfexport import dim_bounds  # noqa: E402
from hfexport import runtime  # noqa: E402
from hfexport.executorch.runtime import ExecutorchDecodeLoop, ExecutorchRunner  # noqa: E402
from pytest_hfexport.compare import compare  # noqa: E402
from executorch_artifacts import (  # noqa: E402,F401
    ATOL, MAX_CACHE_LEN, NEW_TOKENS, REPO, _ref, _tiny_sample, export_zoo, shared_artifact, shared_dir,
)


# -- static-cache decode: Python loop and the C++ zero-copy loop ---------------------------------------
def export_decode(path: Path) -> dict[str, Any]:
    """llama's static-cache decode graph, with caller-owned inputs and outputs (zero-copy in C++)."""
    import transformers

    entry = get("llama")
    model = entry.model()
    inputs = entry.sample_inputs(model)
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    config = ExecutorchConfig(dynamic=True, alloc_graph_input=False, alloc_graph_output=False)
    programs = ExecutorchExporter().export_for_generation(
        model, inputs, config, generation_config=generation, multi_token_decode=True
    )
    ExecutorchExporter.save(programs["decode"], str(path))
    return {"inputs": programs["decode"].hfexport_io["inputs"]}


def _eager_tokens(prompt: torch.Tensor) -> list[int]:
    import transformers

    entry = get("llama")
    model = entry.model()
    config = transformers.GenerationConfig(
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        cache_implementation="static",
        max_cache_len=MAX_CACHE_LEN,
    )
    with torch.no_grad():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    return out[0, prompt.shape[1] :].tolist()


def _prompt() -> torch.Tensor:
    entry = get("llama")
    return entry.sample_inputs(entry.model())["input_ids"][:1]


@pytest.mark.hfexport_slow
def test_decode_loop_gives_eager_greedy_tokens(shared_dir):
    path, record = shared_artifact(shared_dir, "llama_decode", export_decode)
    assert any(n.startswith("past_key_values.") for n in record["inputs"])
    loop = runtime.decode.decode_loop(str(path), "executorch")
    assert isinstance(loop, ExecutorchDecodeLoop) and loop.max_cache_len == MAX_CACHE_LEN
    prompt = _prompt()
    result = loop.generate(prompt, NEW_TOKENS)
    assert result.tokens == _eager_tokens(prompt)
    again = loop.generate(prompt, NEW_TOKENS)  # reset() really empties the cache
    assert again.tokens == result.tokens and again.tokens_per_s > 0
    with pytest.raises(ValueError, match="planned for at most"):  # not an opaque execute() error later
        runtime.decode.decode_loop(str(path), "executorch", max_cache_len=2 * MAX_CACHE_LEN)


def export_owned_decode(path: Path) -> dict[str, Any]:
    """The same decode graph with the cache owned by the program (mutable buffers, no per-step copies)."""
    import transformers

    entry = get("llama")
    model = entry.model()
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    configs = {"prefill": ExecutorchConfig(), "decode": ExecutorchConfig(dynamic=True)}
    programs = ExecutorchExporter(cache_as_buffers=True).export_for_generation(
        model, entry.sample_inputs(model), configs, generation_config=generation, multi_token_decode=True
    )
    ExecutorchExporter.save(programs["decode"], str(path))
    return {"owned": programs["decode"].hfexport_io.get("owned_inputs", {})}


@pytest.mark.hfexport_slow
def test_program_owned_cache_decode_loop_gives_eager_greedy_tokens(shared_dir):
    path, record = shared_artifact(shared_dir, "llama_decode_owned", export_owned_decode)
    assert "past_key_values.layers.0.keys" in record["owned"]
    loop = ExecutorchDecodeLoop(str(path))
    assert loop.owned and not loop.cache_names  # only tokens, mask and positions cross the boundary
    prompt = _prompt()
    result = loop.generate(prompt, NEW_TOKENS)
    assert result.tokens == _eager_tokens(prompt)
    assert loop.runner.attribute("past_key_values.layers.0.keys").abs().sum() > 0  # state lives in the program
    assert loop.generate(prompt, NEW_TOKENS).tokens == result.tokens


@pytest.mark.hfexport_slow
@pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="no C++ compiler (g++) on PATH: the C++ example cannot be built here",
)
def test_cpp_zero_copy_decode_matches_python_loop(shared_dir):
    path, _ = shared_artifact(shared_dir, "llama_decode", export_decode)
    binary = shared_dir / "decode_cpp"
    from filelock import FileLock

    with FileLock(str(shared_dir / "decode_cpp.lock")):
        if not binary.exists():
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
            build = subprocess.run(
                ["bash", str(REPO / "examples/cpp/build.sh"), str(binary)],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert build.returncode == 0, build.stderr[-3000:]
    prompt = _prompt()
    run = subprocess.run(
        [str(binary), str(path), str(MAX_CACHE_LEN), str(NEW_TOKENS), *map(str, prompt[0].tolist())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    tokens = [int(t) for t in run.stdout.split()]
    python_tokens = ExecutorchDecodeLoop(str(path)).generate(prompt, NEW_TOKENS).tokens
    assert tokens == python_tokens
    assert "zero_copy=1" in run.stderr, run.stderr


def test_static_cache_axes_are_bounded_at_the_cache_length():
    """The planned (metadata) size of a static cache must be max_cache_len, not max_length: a caller allocates the
    cache from the metadata and the mask over MAX_CACHE_LEN slots (the guide's loop failed with XNNPACK's
    "Propagating input shapes failed" on a 128-slot cache and a 32-slot mask). Trace and bounds only, no lowering."""
    import transformers

    from hfexport.dynamo import split_inputs
    from hfexport.generation import decompose_for_generation

    entry = get("llama")
    model = entry.model()
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    components = decompose_for_generation(model, entry.sample_inputs(model), generation, True)
    module, kwargs = components["decode"]
    # The prefill's cache has no tensors before its first update: its slots come from the layers' max_cache_len.
    assert dim_bounds.static_cache_slots(split_inputs(components["prefill"][1])[0]) == MAX_CACHE_LEN
    exporter = ExecutorchExporter(max_length=100)
    config = ExecutorchConfig(dynamic=True)
    program = exporter.trace(module, kwargs, config)
    graph_inputs, _ = split_inputs(kwargs)
    exporter.bound_dynamic_dims(program, graph_inputs, model)
    user = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    uppers = {}
    for name, placeholder in zip(flatten_named(graph_inputs), user):
        val = nodes[placeholder].meta["val"]
        uppers[name] = [
            int(program.range_constraints[d.node.expr].upper)
            if isinstance(d, torch.SymInt) and d.node.expr.is_symbol
            else int(d)
            for d in val.shape
        ]
    keys = uppers["past_key_values.layers.0.keys"]
    assert keys[0] == 8 and keys[1:] == list(kwargs["past_key_values"].layers[0].keys.shape[1:])
    assert keys[2] == MAX_CACHE_LEN
    # The query never holds more tokens than the cache has slots: capped there, not at max_length (at real size
    # the default 2048 planned gigabytes of logits and the program failed to load).
    assert MAX_CACHE_LEN < 100 and uppers["input_ids"] == [8, MAX_CACHE_LEN]



def test_an_in_place_cache_update_keeps_the_input_storage_to_the_end(tmp_path):
    """Every output of the decode graph, the updated cache included, equals eager's: with EXIR's planner freeing
    an in-place updated input at its update, an int64 written later landed on layer 1's first key (0.32 off)."""
    import copy

    import transformers

    from hfexport.generation import decompose_for_generation

    entry = get("llama")
    model = entry.model()
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    module, kwargs = decompose_for_generation(model, entry.sample_inputs(model), generation, True)["decode"]
    program = ExecutorchExporter().export(module, kwargs, ExecutorchConfig(dynamic=True, backend="portable"))
    path = tmp_path / "decode.pte"
    ExecutorchExporter.save(program, str(path))
    with torch.no_grad():
        expected = flatten_named(module(**copy.deepcopy(dict(kwargs))))
    runner = runtime.load(str(path))
    flat = runner.flatten_inputs(copy.deepcopy(dict(kwargs)))
    got = runner({k: v for k, v in flat.items() if k in set(runner.input_names)})
    verdict = compare(expected, got, "executorch")
    assert verdict.ok, verdict
    assert any(name.endswith("layers.1.keys") for name in got)


def test_a_plan_that_puts_tensors_on_an_updated_input_is_refused(monkeypatch):
    """Without the read-through of in-place updates the plan reuses the updated keys' storage: the export must
    say so, not write a program that returns another tensor's bytes as the cache."""
    import transformers

    from hfexport.generation import decompose_for_generation
    from hfexport.executorch import passes as executorch_passes

    monkeypatch.setattr(executorch_passes, "_read_through_the_input", lambda node: None)
    entry = get("llama")
    model = entry.model()
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    module, kwargs = decompose_for_generation(model, entry.sample_inputs(model), generation, True)["decode"]
    with pytest.raises(HfExportError, match="frees the mutated input .* puts .* later tensor") as info:
        ExecutorchExporter().export(module, kwargs, ExecutorchConfig(dynamic=True, backend="portable"))
    assert info.value.stage == "lowering"

@pytest.mark.parametrize(
    ("config", "max_length", "bound"),
    [
        ("T5Config", 2048, 512),  # no position limit: 2048 planned 4.6 GB of attention scores for tiny t5
        ("T5Config", 4096, 4096),  # an explicit max_length is the caller's choice
        ("WhisperConfig", 2048, 448),  # the decoder's max_target_positions
        ("BartConfig", 2048, 1024),  # max_position_embeddings
        ("MambaConfig", 2048, 64),  # state-space: the closed-form scan's plan is quadratic in length
    ],
)
def test_sequence_bound_follows_the_models_position_limit(config, max_length, bound):
    import transformers

    from hfexport.dim_bounds import sequence_bound

    class Model:
        pass

    model = Model()
    model.config = getattr(transformers, config)()
    assert sequence_bound(model, max_length) == bound
    assert sequence_bound(object(), 2048) == 2048  # not a transformers model: the exporter's bound

"""ExecutorchExporter, ExecutorchRunner, ExecutorchDecodeLoop and the C++ zero-copy decode example.

Lowering to ExecuTorch takes 30-200 s per model on two cores, so every export is done once
per session and saved into a folder shared by all pytest-xdist workers (``shared_artifact``:
a file lock, then build-or-reuse). Tests then work on the saved ``.pte`` (+ ``.pte.json``),
which also covers save and load. The slowest models are marked ``hfexport_slow``.
"""

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

ATOL = 1e-3
REPO = Path(__file__).resolve().parents[1]
MAX_CACHE_LEN = 32
NEW_TOKENS = 16


# -- shared artifacts ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session sees (the parent of the per-worker base temp)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "hfexport_executorch"
    path.mkdir(exist_ok=True)
    return path


def shared_artifact(shared_dir: Path, name: str, build: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict]:
    """Build ``name`` once per session (under a lock), return (path, the record build returned)."""
    from filelock import FileLock

    path = shared_dir / f"{name}.pte"
    record = shared_dir / f"{name}.record.json"
    with FileLock(str(shared_dir / f"{name}.lock")):
        if not record.exists():
            data = build(path)
            record.write_text(json.dumps(data))
    return path, json.loads(record.read_text())


def export_zoo(name: str, path: Path) -> dict[str, Any]:
    """Export a zoo model with dynamic=True and save it; record what the export left on the model."""
    import time

    from transformers.integrations.moe import ExpertsInterface

    entry = get(name)
    model = entry.model()
    before = snapshot_model(model)
    experts_before = model.get_experts_implementation() if hasattr(model, "get_experts_implementation") else None
    mapping_before = dict(ExpertsInterface._global_mapping)
    start = time.perf_counter()
    program = ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    seconds = time.perf_counter() - start
    ExecutorchExporter.save(program, str(path))
    experts_after = model.get_experts_implementation() if hasattr(model, "get_experts_implementation") else None
    return {
        "seconds": seconds,
        "model_diff": diff_model_state(model, before),
        "experts_before": experts_before,
        "experts_after": experts_after,
        "mapping_restored": all(ExpertsInterface._global_mapping.get(k) is v for k, v in mapping_before.items()),
        "grouped_mm_in_program": any(
            "grouped_mm" in str(op)
            for op in program.exported_program().graph.nodes
            if hasattr(op, "target") and op.op == "call_function"
            for op in [op]
            if "grouped_mm" in str(op.target)
        ),
    }


def _ref(model: Any, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return flatten_named(model(**inputs))


# -- the zoo: export, save, load, compare at the sample and other shapes ------------------------------
ZOO_MODELS = [
    "llama",
    "bert",
    "vit",
    pytest.param("qwen3_moe", marks=pytest.mark.hfexport_slow),
    pytest.param("gpt2", marks=pytest.mark.hfexport_slow),
    pytest.param("t5", marks=pytest.mark.hfexport_slow),
]


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_model_matches_eager_at_several_shapes(name, shared_dir):
    path, record = shared_artifact(shared_dir, name, lambda p: export_zoo(name, p))
    assert record["model_diff"] == [], record["model_diff"]
    entry = get(name)
    model = entry.model()
    run = runtime.load(path)
    assert isinstance(run, ExecutorchRunner)
    b, s = entry.sample
    shapes = [entry.sample, (entry.batch, entry.other_seq if entry.seq else s), (3, s + 3)]  # batch 1, 2 and 3
    for batch, seq in shapes:
        inputs = entry.sample_inputs(model, batch, seq)
        ref = _ref(model, inputs)
        got = run(inputs)
        assert list(got) == list(ref), f"output names {list(got)} != eager's {list(ref)}"
        result = compare(ref, got, "executorch", tolerance=ATOL, label=f"{name} at batch {batch}, seq {seq}")
        assert result.ok, result.message()


@pytest.mark.hfexport_slow
def test_moe_experts_swap_is_reverted_on_the_callers_model(shared_dir):
    _, record = shared_artifact(shared_dir, "qwen3_moe", lambda p: export_zoo("qwen3_moe", p))
    assert record["experts_before"] == record["experts_after"]
    assert record["mapping_restored"]
    assert record["model_diff"] == []
    assert not record["grouped_mm_in_program"]


# -- small programs for the exporter's own contract ----------------------------------------------------
class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": torch.relu(self.proj(x)), "z": x.sum(-1)}


class Counter(torch.nn.Module):
    """A module that mutates a buffer (mutable state the program owns)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum(0))
        return self.total * 1.0


def _tiny_sample(batch: int = 2, seq: int = 3) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"x": torch.randn(batch, seq, 8)}


@pytest.fixture(scope="module")
def tiny_program():
    torch.manual_seed(0)
    model = TinyMLP().eval()
    return model, ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))


def test_cuda_backend_without_cuda_raises_before_any_work():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the backend='cuda' refusal only applies without it")
    with pytest.raises(RuntimeError, match="cuda"):
        # not even a model: the check must come first
        ExecutorchExporter().export(object(), {}, ExecutorchConfig(backend="cuda"))


def test_unbounded_dims_get_a_logged_bound(caplog):
    model = TinyMLP().eval()
    with caplog.at_level(logging.INFO, logger="hfexport.executorch"):
        program = ExecutorchExporter(max_batch=5, max_length=40).export(
            model, _tiny_sample(), ExecutorchConfig(dynamic=True)
        )
    text = caplog.text
    assert "max_batch=5" in text and "max_length=40" in text and "(batch)" in text
    bounds = sorted(hi for _, hi in program.hfexport_io["dynamic_dims"].values())
    assert bounds == [5, 40]
    meta = ExecutorchRunner(program).method.metadata
    assert list(meta.input_tensor_meta(0).sizes()) == [5, 40, 8]  # planned at the bounds


def test_runner_names_outputs_and_refuses_bad_inputs(tiny_program):
    model, program = tiny_program
    run = ExecutorchRunner(program)
    assert run.input_names == ["x"] and run.output_names == ["y", "z"]
    for batch, seq in ((2, 3), (1, 1), (7, 20)):
        inputs = _tiny_sample(batch, seq)
        result = compare(_ref(model, inputs), run(inputs), "executorch", tolerance=1e-5, label=f"{batch}x{seq}")
        assert result.ok, result.message()
    with pytest.raises(RunnerInputError, match="'x'.*dtype"):
        run({"x": torch.zeros(2, 3, 8, dtype=torch.float64)})
    with pytest.raises(RunnerInputError, match="'x'.*shape"):
        run({"x": torch.zeros(2, 3)})  # wrong rank
    with pytest.raises(RunnerInputError, match="'x'.*above"):
        run({"x": torch.zeros(9, 3, 8)})  # batch bound is 8


def test_explicit_dim_is_honoured():
    from torch.export import Dim

    model = TinyMLP().eval()
    shapes = {"x": {0: Dim("b", min=1, max=3), 1: Dim("s", min=2, max=6)}}
    program = ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic_shapes=shapes))
    assert sorted(map(tuple, program.hfexport_io["dynamic_dims"].values())) == [(1, 3), (2, 6)]
    run = ExecutorchRunner(program)
    assert list(run.method.metadata.input_tensor_meta(0).sizes()) == [3, 6, 8]
    result = compare(_ref(model, _tiny_sample(3, 6)), run(_tiny_sample(3, 6)), "executorch", tolerance=1e-5)
    assert result.ok, result.message()
    with pytest.raises(RunnerInputError, match="above the 3"):
        run(_tiny_sample(4, 3))


class MaskByBatch(torch.nn.Module):
    """gpt2's ``attention_mask.view(batch, -1)``: the mask's length axis is a product over the batch."""

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.view(input_ids.shape[0], -1)
        return input_ids.float().sum(-1, keepdim=True) + mask.float().cumsum(-1)


def test_a_padding_mask_longer_than_the_sample_runs(monkeypatch):
    """One batch symbol for ids and mask: with one each, the view's axis is (mask batch * length) // batch,
    which the memory planner bounds by the sample, and a batch-2 mask of 33 failed to run (error 0x1)."""
    from hfexport import shapes

    def export_and_run():
        def tokens(mask_len):
            return {"input_ids": torch.ones(2, 1, dtype=torch.long), "attention_mask": torch.ones(2, mask_len).long()}

        program = ExecutorchExporter(max_length=64).export(MaskByBatch(), tokens(8), ExecutorchConfig(dynamic=True))
        inputs = tokens(33)
        return compare(_ref(MaskByBatch(), inputs), ExecutorchRunner(program)(inputs), "executorch", tolerance=1e-5)

    assert export_and_run().ok
    monkeypatch.setattr(shapes, "tie_batch_axes", lambda spec, inputs, minimum=None: spec)  # the fault: one symbol per input
    with pytest.raises(HfExportError, match="0x1"):
        export_and_run()


@pytest.mark.parametrize("flag", ["alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers"])
def test_alloc_flags_reach_memory_planning(flag):
    model = Counter().eval()
    sample = {"x": torch.ones(2, 4)}
    program = ExecutorchExporter().export(model, sample, ExecutorchConfig(**{flag: False}))
    meta = ExecutorchRunner(program).method.metadata
    planned = {
        "alloc_graph_input": meta.input_tensor_meta(0).is_memory_planned(),
        "alloc_graph_output": meta.output_tensor_meta(0).is_memory_planned(),
        "alloc_mutable_buffers": meta.attribute_tensor_meta(0).is_memory_planned(),
    }
    assert planned == {k: k != flag for k in planned}


def test_failed_save_leaves_no_file(tmp_path, tiny_program):
    _, program = tiny_program
    target = tmp_path / "model.pte"

    class Broken:
        hfexport_io = program.hfexport_io

        def write_to_file(self, f):
            f.write(b"partial")
            raise OSError("disk full")

    with pytest.raises(HfExportError, match="disk full"):
        ExecutorchExporter.save(Broken(), str(target))
    assert list(tmp_path.iterdir()) == []
    written = ExecutorchExporter.save(program, str(target))
    assert sorted(Path(p).name for p in written) == ["model.pte", "model.pte.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte", "model.pte.json"]


def test_failed_lowering_leaves_model_and_patches_as_they_were(monkeypatch):
    from hfexport.patching import PATCHES
    from hfexport.patching.registry import resolve_owner

    model = TinyMLP().eval()
    before = snapshot_model(model)
    originals = {
        p.path: getattr(*resolve_owner(p.path))
        for b in ("executorch", "executorch_lowering")
        for p in PATCHES.get(b, [])
        if resolve_owner(p.path)
    }

    def boom(*args, **kwargs):
        raise RuntimeError("lowering exploded")

    import executorch.exir

    monkeypatch.setattr(executorch.exir, "to_edge_transform_and_lower", boom)
    with pytest.raises(HfExportError, match="lowering exploded"):
        ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))
    assert diff_model_state(model, before) == []
    for path, original in originals.items():
        assert getattr(*resolve_owner(path)) is original, f"{path} still patched"


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


class TopProbability(torch.nn.Module):
    """SwitchTransformers' router output: the top probability per token, unsqueezed back to [batch, seq, 1]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.classifier = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(self.classifier(x).softmax(-1), dim=-1).values.unsqueeze(-1) * x


def test_an_unsqueeze_with_two_dynamic_dims_lowers_and_matches():
    model = TopProbability().eval()
    program = ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))
    for sample in (_tiny_sample(), _tiny_sample(batch=3, seq=5)):
        got = ExecutorchRunner(program)(sample)
        with torch.no_grad():
            torch.testing.assert_close(next(iter(flatten_named(got).values())), model(**sample), atol=1e-5, rtol=1e-4)


def test_without_the_partitioner_check_xnnpack_refuses_the_unsqueeze(monkeypatch):
    from hfexport.patching import PATCHES
    from hfexport.executorch.fixes import LOWERING

    monkeypatch.setitem(PATCHES, LOWERING, [p for p in PATCHES[LOWERING] if "UnsqueezeCopyConfig" not in p.path])
    with pytest.raises(HfExportError, match="only supports 1 dynamic dimension"):
        ExecutorchExporter().export(TopProbability().eval(), _tiny_sample(), ExecutorchConfig(dynamic=True))


def _bert_with_explicit_ranges() -> tuple[Any, dict, ExecutorchConfig]:
    """BERT exported as the guide configures explicit ranges: Dim(min, max) and deferred run-time asserts, which
    leave a torch.sym_min (its position_ids slice) in the program."""
    entry = get("bert")
    model = entry.model()
    sample = entry.sample_inputs(model)
    length = sample["input_ids"].shape[1]
    seq = torch.export.Dim("seq", min=2, max=length + 5)
    spec = {k: {1: seq} for k, v in sample.items() if isinstance(v, torch.Tensor) and v.dim() == 2}
    config = ExecutorchConfig(dynamic_shapes=spec, prefer_deferred_runtime_asserts_over_guards=True)
    return model, sample, config


def test_size_functions_from_deferred_asserts_lower_and_match_eager():
    model, sample, config = _bert_with_explicit_ranges()
    runner = runtime.runner_for(ExecutorchExporter().export(model, sample, config), "executorch")
    with torch.no_grad():
        expected = flatten_named(model(**sample))
    assert compare(expected, runner(**sample), "executorch").ok


def test_without_the_edge_config_entry_the_size_functions_fail_lowering(monkeypatch):
    """The fault twin: EXIR's default edge config refuses torch.sym_min as an edge op."""
    from executorch.exir import EdgeCompileConfig

    from hfexport.executorch import fixes as executorch_fixes

    model, sample, config = _bert_with_explicit_ranges()
    monkeypatch.setattr(executorch_fixes, "edge_compile_config", lambda program: EdgeCompileConfig())
    with pytest.raises(HfExportError, match="to_edge_transform_and_lower"):
        ExecutorchExporter().export(model, sample, config)


class _PinsBatchOne(torch.nn.Module):
    """Branches on a batch of 1 (as Funnel's pooling does): a batch-1 trace guards the batch to 1."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids) * attention_mask[..., None]
        if hidden.shape[0] == 1:
            hidden = hidden[0][None]  # the same values: only the trace tells the branches apart
        return hidden.sum(-1)


def _traced_batches(monkeypatch):
    """The batch of ``input_ids`` in every torch.export trace of the model (XNNPACK's own pattern graphs aside)."""
    import torch.export._trace as export_trace

    batches = []
    original = export_trace._export

    @functools.wraps(original)
    def counted(mod, args, kwargs=None, *rest, **options):
        if isinstance(kwargs, dict) and "input_ids" in kwargs:
            batches.append(kwargs["input_ids"].shape[0])
        return original(mod, args, kwargs, *rest, **options)

    monkeypatch.setattr(export_trace, "_export", counted)
    return batches


def test_a_batch_one_trace_that_pins_the_tied_batch_is_opened_by_the_batch_retrace(monkeypatch):
    """The ExecuTorch exporter ties the token inputs' batch axes to one named Dim; a trace that pins it raised
    'Constraints violated (batch)' (Funnel). It is traced again from batch 2, the batch still tied, and opened to
    batch 1: the batch-1 trace that failed and the batch-2 one, no third (neither a two-pass retry at batch 1, which
    pins the batch the same way, nor one with free axes at batch 1, which cost Funnel 6.6 s before the batch-2
    trace it needed anyway)."""
    from executorch.runtime import Runtime

    batches = _traced_batches(monkeypatch)
    model = _PinsBatchOne().eval()
    ids = torch.randint(0, 16, (1, 5))
    manager = ExecutorchExporter().export(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                          ExecutorchConfig(dynamic=True))
    assert batches == [1, 2]
    program = manager.exported_program("forward")
    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    batch = {str(n.meta["val"].shape[0]) for n in program.graph.nodes if n.op == "placeholder" and n.name in users}
    assert len(batch) == 1, f"the batch axes are no longer tied: {batch}"
    method = Runtime.get().load_program(manager.buffer).load_method("forward")
    for wide in (torch.randint(0, 16, (3, 7)), ids):
        (got,) = method.execute([wide, torch.ones_like(wide)])
        torch.testing.assert_close(got, model(wide, torch.ones_like(wide)))


class _UntiesFirstTrace(Trace):
    """Fault: where the tied trace pins the batch, traces at batch 1 with free axes before the batch-2 retrace."""

    def export_once(self, model, graph_inputs, dynamic_shapes, config, plan):
        try:
            return self.export_checked(model, graph_inputs, dynamic_shapes, config)
        except HfExportError as exc:
            if "Constraints violated (batch)" not in str(exc):
                raise
        free = plan.free(graph_inputs)
        return self.export_checked(model, graph_inputs, free, config)


class _UntiesFirst(ExecutorchExporter):
    tracer = _UntiesFirstTrace(**{f.name: getattr(ExecutorchExporter.tracer, f.name)
                                  for f in dataclasses.fields(ExecutorchExporter.tracer)})


def test_a_tied_batch_fallback_through_free_axes_is_told_apart(monkeypatch):
    batches = _traced_batches(monkeypatch)
    ids = torch.randint(0, 16, (1, 5))
    _UntiesFirst().export(_PinsBatchOne().eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                          ExecutorchConfig(dynamic=True))
    assert batches == [1, 1, 2]  # the test above requires [1, 2]


def _layout_question(is_nhwc_tensor):
    """(the answer, guards and replacements the question added) for a [batch, 3, 1, 1] tensor expanded from one
    row (batch stride 0), its batch symbolic with hint 1 as in a size-oblivious batch-1 trace: dense in either
    layout only at batch 1."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    shape_env = ShapeEnv(specialize_zero_one=False)
    symbol = shape_env.create_symbol(1, source=ConstantSource("batch"), dynamic_dim=DimDynamic.DYNAMIC)
    with FakeTensorMode(shape_env=shape_env):
        value = torch.empty_strided((shape_env.create_symintnode(symbol, hint=1), 3, 1, 1), (0, 1, 1, 1))
    answer = is_nhwc_tensor(value)
    return answer, len(shape_env.guards) + len(shape_env.replacements)


def test_xnnpack_s_layout_question_is_answered_without_pinning_the_batch():
    """XNNPACK's layout pass asked is_contiguous() of such a tensor, which guards batch == 1; the lowering then
    sized Qwen2-VL's tensors for batch 1 (its position planes overran their memory plan). hfexport's patch
    answers from what holds at every size."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import (
        ChannelsLastTaggedReshapePass,
    )

    from hfexport.executorch import fixes as executorch_fixes

    original = ChannelsLastTaggedReshapePass._is_nhwc_tensor
    assert _layout_question(executorch_fixes._layout_read_without_guards(original)) == (False, 0)
    answer, guards = _layout_question(original)  # the fault: XNNPACK's own question
    assert guards > 0


def test_qwen2_vl_s_lowered_logits_keep_the_batch_symbol():
    """Before the layout patch they came out [1, seq, vocab], the batch pinned by XNNPACK's layout question."""
    from helpers import zoo_model

    entry, model = zoo_model("qwen2_vl")
    manager = ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    program = manager.exported_program("forward")
    (logits, *_) = next(n for n in program.graph.nodes if n.op == "output").args[0]
    assert isinstance(logits.meta["val"].shape[0], torch.SymInt), logits.meta["val"].shape


class _TanhGelu(torch.nn.Module):
    """As transformers' GELUTanh: F.gelu bound at construction, out of reach of a patch of the attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.act = functools.partial(torch.nn.functional.gelu, approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def test_tanh_gelu_matches_eager(tmp_path):
    """XNNPACK's own tanh-GELU kernel is 4.7e-4 off torch's on these inputs; the export writes the formula out
    (executorch.fixes: a fix of the traced program, since transformers binds F.gelu at construction), which is float32 rounding off. 2e-6: twice the 4.8e-7 measured, on values to 9."""
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0)) * 3
    program = ExecutorchExporter().export(_TanhGelu(), {"x": x}, ExecutorchConfig())
    ExecutorchExporter.save(program, str(tmp_path / "gelu.pte"))
    got = next(iter(flatten_named(runtime.load(str(tmp_path / "gelu.pte"))(x=x)).values()))
    assert float((got - _TanhGelu()(x)).abs().max()) < 2e-6


def test_a_plan_that_cannot_load_here_is_refused_at_export():
    """A program whose planned activations exceed the limit (default: this machine's memory) is refused at
    export with the plan's size and the bounds to lower, not written as a .pte that fails to load with 0x21;
    the model is left as it was. The limit is lowered here to below the tiny model's plan."""
    entry = get("llama")
    model = entry.model()
    before = snapshot_model(model)
    exporter = ExecutorchExporter(max_planned_memory=1024)
    with pytest.raises(HfExportError, match=r"GiB of activations .* max_batch=8, max_length=2048") as raised:
        exporter.export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    assert raised.value.stage == "lowering"
    assert diff_model_state(model, before) == []
    assert dim_bounds.physical_memory() > 2**30  # the default limit, which every other export here passes under

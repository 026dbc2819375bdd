"""OnnxExporter and OrtRunner on tiny zoo models: exact against eager, every OnnxConfig field honoured.

Exports are the slow part (seconds each), so each one is made once per worker by a
module-scoped fixture and shared by the tests that read it.
"""

import contextlib
import copy
import os
from pathlib import Path

import onnx
import pytest
import torch
import transformers

from hfexport import HfExportError, OnnxConfig, OnnxExporter, runtime
from hfexport.errors import RunnerInputError
from hfexport.dynamo import split_inputs
from hfexport.onnx import newest_opset
from hfexport.outputs import flatten_named
from hfexport.runtime.onnxruntime import OrtRunner

from helpers import assert_matches, eager, zoo_model

ATOL = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (entry, model, program, saved path, files written to the cwd during export)."""
    cache = {}

    def get(name):
        if name not in cache:
            entry, model = zoo_model(name)
            cwd = tmp_path_factory.mktemp(f"cwd_{name}")
            with contextlib.chdir(cwd):
                program = OnnxExporter().export(model, entry.sample_inputs(model), OnnxConfig(dynamic=True))
            stray = sorted(os.listdir(cwd))
            path = tmp_path_factory.mktemp(f"saved_{name}") / f"{name}.onnx"
            OnnxExporter.save(program, str(path))
            cache[name] = (entry, model, program, path, stray)
        return cache[name]

    return get


# -- round trips on the zoo ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gpt2", "bert", "vit", "t5"])
def test_saved_model_matches_eager_at_sample_and_other_shapes(exported, name):
    entry, model, program, path, _ = exported(name)
    assert isinstance(program, torch.onnx.ONNXProgram)
    run = runtime.load(path)
    assert isinstance(run, OrtRunner)
    sample, other = entry.sample_inputs(model), entry.input_sets(model, ("batch",))["batch"]
    # Inputs named as flatten_named names the sample, outputs as it names the eager output.
    assert run.input_names == list(flatten_named(split_inputs(sample)[0]))
    for inputs in (sample, other):
        ref = flatten_named(eager(model, inputs))
        assert_matches(ref, run(inputs), "onnx", tolerance=ATOL, ordered=True)


def test_output_names_are_what_they_are(exported):
    _, _, program, _, _ = exported("t5")
    names = [v.name for v in program.model.graph.outputs]
    assert names[0] == "logits" and "encoder_last_hidden_state" in names
    assert "past_key_values.self_attention_cache.layers.0.keys" in names or any(
        n.startswith("past_key_values.") for n in names)
    assert not any(n.startswith(("output.", "input.")) for n in names)  # nothing clashes with an input here


def test_moe_experts_patch_is_reverted(exported):
    from transformers.integrations.moe import ExpertsInterface, grouped_mm_experts_forward

    exported("qwen3_moe")
    assert ExpertsInterface._global_mapping["grouped_mm"] is grouped_mm_experts_forward


# -- OnnxConfig fields ------------------------------------------------------------------------------------


def test_output_path_none_keeps_the_model_in_memory(exported):
    *_, program, _, stray = exported("vit")
    assert stray == []
    assert program.model.graph.initializers  # weights are in the returned model


def test_output_path_writes_model_and_side_file_atomically(tmp_path):
    entry, model = zoo_model("vit")
    path = tmp_path / "sub" / "vit.onnx"
    program = OnnxExporter().export(model, entry.sample_inputs(model),
                                     OnnxConfig(dynamic=True, output_path=str(path)))
    assert sorted(p.name for p in path.parent.iterdir()) == ["vit.onnx", "vit.onnx_data"]
    run = runtime.load(path)
    inputs = entry.input_sets(model, ("batch",))["batch"]
    ref = flatten_named(eager(model, inputs))
    assert_matches(ref, run(inputs), "onnx", tolerance=ATOL, ordered=True)
    assert_matches(ref, OrtRunner(program)(inputs), "onnx", tolerance=ATOL, ordered=True)


@pytest.fixture(scope="module")
def vit_variant(tmp_path_factory):
    """opset 18, no optimizer, weights inside the .onnx."""
    entry, model = zoo_model("vit")
    path = tmp_path_factory.mktemp("variant") / "v.onnx"
    config = OnnxConfig(dynamic=True, output_path=str(path), opset_version=18, optimize=False, external_data=False)
    program = OnnxExporter().export(model, entry.sample_inputs(model), config)
    return entry, model, program, path


def test_external_data_false_writes_one_file(vit_variant):
    entry, model, _, path = vit_variant
    assert sorted(p.name for p in path.parent.iterdir()) == ["v.onnx"]
    proto = onnx.load(str(path), load_external_data=False)
    assert proto.graph.initializer and all(not t.external_data for t in proto.graph.initializer)
    inputs = entry.sample_inputs(model)
    ref = flatten_named(eager(model, inputs))
    assert_matches(ref, runtime.load(path)(inputs), "onnx", tolerance=ATOL, ordered=True)


def test_external_data_true_puts_weights_in_the_side_file(exported, tmp_path):
    *_, program, path, _ = exported("vit")
    side = path.parent / (path.name + "_data")
    assert side.exists() and side.stat().st_size > 0
    proto = onnx.load(str(path), load_external_data=False)
    assert any(t.external_data for t in proto.graph.initializer)
    # save() may override the program's choice
    single = tmp_path / "single.onnx"
    assert OnnxExporter.save(program, str(single), external_data=False) == [str(single)]
    assert not (tmp_path / "single.onnx_data").exists()


def test_opset_version_is_honoured(exported, vit_variant):
    assert onnx.load(str(vit_variant[3])).opset_import[0].version == 18
    assert exported("vit")[2].model.opset_imports[""] == newest_opset() == 25


def test_opset_beyond_the_converter_is_refused_and_writes_nothing(tmp_path):
    entry, model = zoo_model("vit")
    path = tmp_path / "x.onnx"
    with pytest.raises(HfExportError, match="opset_version=26") as info:
        OnnxExporter().export(model, entry.sample_inputs(model), OnnxConfig(opset_version=26, output_path=str(path)))
    assert info.value.stage == "lowering"
    assert list(tmp_path.iterdir()) == []


def _node_counts(program):
    import onnxscript

    proto = program.model_proto
    return len(proto.graph.node), len(onnxscript.optimizer.optimize(proto).graph.node)


def test_optimize_flag(exported, vit_variant):
    before, after = _node_counts(exported("vit")[2])
    assert after == before  # already optimised: nothing left to fold
    before, after = _node_counts(vit_variant[2])
    assert after < before  # optimize=False: the optimizer still finds work


def test_export_params_false_gives_a_graph_without_weights(tmp_path):
    entry, model = zoo_model("vit")
    path = tmp_path / "noweights.onnx"
    program = OnnxExporter().export(model, entry.sample_inputs(model),
                                    OnnxConfig(dynamic=True, export_params=False, output_path=str(path)))
    assert len(program.model.graph.initializers) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noweights.onnx"]  # no weights, no side file
    proto = onnx.load(str(path))
    assert len(proto.graph.initializer) == 0


def test_keep_initializers_as_inputs_lists_weights_as_overridable_inputs():
    entry, model = zoo_model("vit")
    program = OnnxExporter().export(model, entry.sample_inputs(model),
                                    OnnxConfig(dynamic=True, keep_initializers_as_inputs=True))
    graph = program.model.graph
    input_names = [v.name for v in graph.inputs]
    assert input_names[0] == "pixel_values"
    weights = set(graph.initializers)
    assert weights and weights <= set(input_names)
    run = OrtRunner(program)
    assert run.input_names == ["pixel_values"]  # weights have defaults: not required
    inputs = entry.sample_inputs(model)
    ref = flatten_named(eager(model, inputs))
    assert_matches(ref, run(inputs), "onnx", tolerance=ATOL, ordered=True)
    name = "embeddings.position_embeddings"
    override = {name: 5 * torch.randn(tuple(graph.initializers[name].shape))}
    assert (run({**inputs, **override})["last_hidden_state"] - ref["last_hidden_state"]).abs().max() > 1


# -- cache in, cache out: input./output. names and in-place binding ------------------------------------------


def _static_step(model, entry, position=4, max_cache_len=16):
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_cache_len)
    prompt = entry.sample_inputs(model, batch=1, seq=position)
    with torch.no_grad():
        model(input_ids=prompt["input_ids"], past_key_values=cache, use_cache=True)
    return {"input_ids": prompt["input_ids"][:, -1:], "past_key_values": cache,
            "position_ids": torch.tensor([[position]])}


@pytest.fixture(scope="module")
def static_decode():
    entry, model = zoo_model("llama")
    step = _static_step(model, entry)
    program = OnnxExporter().export(model, {**step, "use_cache": True}, OnnxConfig())
    return entry, model, step, program


def test_cache_in_cache_out_names_get_prefixes(static_decode):
    *_, step, program = static_decode
    inputs = [v.name for v in program.model.graph.inputs]
    outputs = [v.name for v in program.model.graph.outputs]
    cache_names = [n for n in flatten_named(step["past_key_values"], "past_key_values")]
    # The guide's order (ids, mask, positions, cache), whatever order the call passed them in.
    assert inputs == ["input_ids", "position_ids"] + [f"input.{n}" for n in cache_names]
    assert outputs == ["logits"] + [f"output.{n}" for n in cache_names]


def test_runner_hides_prefixes_and_matches_eager(static_decode):
    _, model, step, program = static_decode
    run = OrtRunner(program)
    assert "past_key_values.layers.0.keys" in run.input_names and "logits" in run.output_names
    ref = flatten_named(eager(model, {**step, "past_key_values": copy.deepcopy(step["past_key_values"]),
                                      "use_cache": True}))
    got = run(step)  # eager kwargs, StaticCache included
    assert_matches(ref, got, "onnx", tolerance=ATOL, ordered=True)


def test_shared_buffers_update_the_cache_in_place(static_decode):
    entry, model, step, program = static_decode
    run = OrtRunner(program)
    cache = step["past_key_values"]
    eager_cache = copy.deepcopy(cache)
    buffers = {n: t.clone() for n, t in flatten_named(cache, "past_key_values").items()}
    pointers = {n: t.data_ptr() for n, t in buffers.items()}
    ids = step["input_ids"]
    for position in (4, 5):  # two decode steps through the same buffers
        with torch.no_grad():
            ref = model(input_ids=ids, past_key_values=eager_cache, position_ids=torch.tensor([[position]]),
                        use_cache=True).logits
        out = run.run_with_shared_buffers({"input_ids": ids, "position_ids": torch.tensor([[position]])}, buffers)
        assert list(out) == ["logits"]
        assert_matches({"logits": ref}, out, "onnx", tolerance=ATOL, label=f"decode at {position}")
        ids = ref[:, -1:].argmax(-1)
    assert {n: t.data_ptr() for n, t in buffers.items()} == pointers
    assert_matches(flatten_named(eager_cache, "past_key_values"), buffers, "onnx", tolerance=ATOL, label="cache")
    with pytest.raises(RunnerInputError, match="input/output pairs"):
        run.run_with_shared_buffers({"input_ids": ids, "position_ids": torch.tensor([[6]])},
                                    {"logits": torch.zeros(1, 1, 128)})


class _CacheUpdate(torch.nn.Module):
    """A static cache's update: index_copy_ on the sequence axis, then a read of the updated cache."""

    def forward(self, cache, position, new):
        cache.index_copy_(2, position, new)
        return (cache * 2).sum(-1)


def _cache_update_graph(monkeypatch=None, without_translation=False):
    from hfexport.patching import onnx_fixes

    if without_translation:  # the fault: torch's own translation of the decomposed index_copy
        monkeypatch.setattr(onnx_fixes, "ONNX_TRANSLATIONS",
                            [t for t in onnx_fixes.ONNX_TRANSLATIONS if "index_copy" not in str(t.target)])
    sample = {"cache": torch.zeros(1, 2, 16, 4), "position": torch.tensor([3, 4]), "new": torch.randn(1, 2, 2, 4)}
    return OnnxExporter().export(_CacheUpdate(), sample, OnnxConfig(dynamic=True))


def test_a_cache_update_is_one_scatter_on_the_cache_axis_and_runs_in_place():
    program = _cache_update_graph()
    ops = [node.op_type for node in program.model.graph]
    assert "ScatterElements" in ops and "Transpose" not in ops and "Identity" not in ops, ops
    run = OrtRunner(program)
    buffer = torch.randn(1, 2, 16, 4)
    eager_cache = buffer.clone()
    pointer = buffer.data_ptr()
    for positions in ([5], [6, 7, 8], [0]):
        position = torch.tensor(positions)
        new = torch.randn(1, 2, len(positions), 4)
        ref = _CacheUpdate()(eager_cache, position, new)
        out = run.run_with_shared_buffers({"position": position, "new": new}, {"cache": buffer})
        torch.testing.assert_close(out["output"], ref)
        torch.testing.assert_close(buffer, eager_cache, rtol=0, atol=0)
    assert buffer.data_ptr() == pointer and run.last_shared_writes == {"cache": pointer}


def test_without_the_translation_the_update_transposes_the_whole_cache(monkeypatch):
    ops = [node.op_type for node in _cache_update_graph(monkeypatch, without_translation=True).model.graph]
    assert "Transpose" in ops and "ScatterElements" not in ops, ops


def test_the_cached_registry_follows_the_translation_table(monkeypatch):
    """torchlib's registry is built once per process and translation table: a table changed between two
    exports (a translation removed, then restored) must change the graph each time."""
    def ops(**fault):
        return {node.op_type for node in _cache_update_graph(monkeypatch, **fault).model.graph}

    assert "ScatterElements" in ops()
    assert "ScatterElements" not in ops(without_translation=True)
    monkeypatch.undo()
    assert "ScatterElements" in ops()


def test_decoder_cache_outputs_are_not_identity_copies(static_decode):
    *_, program = static_decode
    graph = program.model.graph
    producers = {o.name: n.op_type for n in graph for o in n.outputs}
    cache_outputs = [o.name for o in graph.outputs if o.name.startswith("output.")]
    assert cache_outputs and all(producers[n] != "Identity" for n in cache_outputs), producers


# -- errors -----------------------------------------------------------------------------------------------------


def test_wrong_input_name_or_shape_is_named(exported):
    entry, model, _, path, _ = exported("vit")
    run = runtime.load(path)
    good = entry.sample_inputs(model)["pixel_values"]
    with pytest.raises(RunnerInputError, match=r"pixel_valuez.*pixel_values|pixel_values.*pixel_valuez"):
        run({"pixel_valuez": good})
    with pytest.raises(RunnerInputError, match=r"'pixel_values' has shape \(1, 3, 16, 16\).*3, 32, 32"):
        run({"pixel_values": good[:, :, :16, :16]})
    with pytest.raises(RunnerInputError, match=r"'pixel_values' has dtype torch.float64.*torch.float32"):
        run({"pixel_values": good.double()})
    shape, dtype = run.expected_inputs()["pixel_values"]
    assert isinstance(shape[0], str) and shape[1:] == (3, 32, 32) and dtype is torch.float32


def test_failed_save_leaves_no_file(exported, tmp_path, monkeypatch):
    import onnx_ir

    program = exported("vit")[2]

    def broken_save(model, path, external_data=None, **kwargs):
        Path(path).write_bytes(b"partial")
        if external_data:
            (Path(path).parent / external_data).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(onnx_ir, "save", broken_save)
    with pytest.raises(HfExportError, match="disk full") as info:
        OnnxExporter.save(program, str(tmp_path / "m.onnx"))
    assert info.value.stage == "save"
    assert list(tmp_path.iterdir()) == []

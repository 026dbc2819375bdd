"""export_for_generation: component split, multi-token decode, static cache with in-place updates, decode loop."""

import copy

import pytest
import torch
import transformers

from hfexport import DynamoConfig, DynamoExporter, HfExportError
from hfexport.runtime.decode import decode_loop
from hfexport.utils import decompose_for_generation

from helpers import assert_matches, eager, zoo_model

ATOL = 1e-5


@pytest.mark.parametrize("name, expected", [
    ("llama", ["prefill", "decode"]),
    ("mamba", ["prefill", "decode"]),
    ("t5", ["encoder", "prefill", "decode"]),
    ("llava", ["image_encoder", "multi_modal_projector", "language_model", "lm_head", "decode"]),
    ("qwen2_vl", ["image_encoder", "language_model", "lm_head", "decode"]),  # projector folded into the tower
])
def test_components_are_read_from_one_generate_run(name, expected):
    entry, model = zoo_model(name)
    components = decompose_for_generation(model, entry.sample_inputs(model))
    assert list(components) == expected
    module, decode = components["decode"]
    assert module is model
    token = "decoder_input_ids" if "decoder_input_ids" in decode else "input_ids"
    assert decode[token].shape[1] == 1  # one decode step
    for kwargs in (kw for _, kw in components.values()):
        assert "return_dict" not in kwargs and "logits_to_keep" not in kwargs


def test_llava_image_encoder_is_a_real_component():
    """transformers 5.23's generate() pre-encodes images; the encoder call is still captured."""
    entry, model = zoo_model("llava")
    components = decompose_for_generation(model, entry.sample_inputs(model))
    encoder, kwargs = components["image_encoder"]
    assert encoder is model.get_encoder(modality="image")
    assert kwargs["pixel_values"].shape == (1, 3, 32, 32)
    assert components["multi_modal_projector"][0] is model.base_model.multi_modal_projector


def test_llava_components_match_their_eager_submodules():
    entry, model = zoo_model("llava")
    programs = DynamoExporter().export_for_generation(model, entry.sample_inputs(model), DynamoConfig(dynamic=True))
    components = decompose_for_generation(model, entry.sample_inputs(model))
    assert set(programs) == set(components)
    for name, (module, kwargs) in components.items():
        program = programs[name]
        graph_kwargs = {k: v for k, v in copy.deepcopy(kwargs).items() if k in program.example_inputs[1]}
        assert_matches(eager(module, copy.deepcopy(kwargs)), program.module()(**graph_kwargs), "dynamo",
                       tolerance=ATOL, label=name)


def test_multi_token_merge_equals_the_single_steps():
    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)
    single = decompose_for_generation(model, inputs, multi_token_decode=False)
    merged = decompose_for_generation(model, inputs, multi_token_decode=True)["decode"][1]
    assert merged["input_ids"].shape[1] == 2
    with torch.no_grad():
        both = model(**copy.deepcopy(merged)).logits
        first = model(**copy.deepcopy(single["decode"][1])).logits
    assert (both[:, :1] - first).abs().max() <= ATOL


@pytest.fixture(scope="module")
def static_llama(tmp_path_factory):
    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)
    config = transformers.GenerationConfig(cache_implementation="static", max_cache_len=32)
    programs = DynamoExporter().export_for_generation(model, inputs, DynamoConfig(dynamic=True),
                                                      generation_config=config, multi_token_decode=True)
    path = tmp_path_factory.mktemp("static") / "decode.pt2"
    DynamoExporter.save(programs["decode"], str(path))
    return entry, model, inputs, programs, path


def test_static_decode_graph_serves_1_and_3_query_tokens(static_llama):
    entry, model, inputs, programs, _ = static_llama
    program = programs["decode"]
    _, template = program.example_inputs
    prompt = inputs["input_ids"]
    for q in (1, 3):
        cache_e = transformers.StaticCache(config=model.config, max_cache_len=32)
        with torch.no_grad():
            model(input_ids=prompt, past_key_values=cache_e, use_cache=True)
        cache_x = copy.deepcopy(cache_e)
        pos = torch.arange(prompt.shape[1], prompt.shape[1] + q)
        step = {"input_ids": torch.randint(3, 128, (1, q)), "position_ids": pos[None],
                "attention_mask": (torch.arange(32)[None, :] <= pos[:, None])[None, None]}
        with torch.no_grad():
            ref = model(**step, past_key_values=cache_e, use_cache=True).logits
        got = program.module()(**step, past_key_values=cache_x).logits
        assert (ref - got).abs().max() <= ATOL
        # the cache passed in is the one updated: same tensors, new contents equal to eager's
        for le, lx in zip(cache_e.layers, cache_x.layers):
            assert torch.allclose(le.keys, lx.keys, atol=ATOL) and int(lx.cumulative_length) == prompt.shape[1] + q


def test_dynamo_records_cache_writes_as_input_mutations(static_llama):
    program = static_llama[3]["decode"]
    kinds = [s.kind.name for s in program.graph_signature.output_specs]
    assert kinds.count("USER_INPUT_MUTATION") >= 4  # keys, values (and counters) of 2 layers


@pytest.mark.parametrize("max_cache_len", [None, 48])
def test_static_decode_loop_gives_eager_greedy_tokens(static_llama, max_cache_len):
    entry, model, inputs, _, path = static_llama
    loop = decode_loop(str(path), "dynamo", max_cache_len=max_cache_len)
    assert loop.max_cache_len == (max_cache_len or 32)
    prompt = inputs["input_ids"][:1]
    keys = loop.cache.layers[0].keys
    result = loop.generate(prompt, 16)
    config = transformers.GenerationConfig(max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                           cache_implementation="static", max_cache_len=32)
    expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    assert result.tokens == expected[0, prompt.shape[1]:].tolist()
    assert loop.cache.layers[0].keys is keys and keys.abs().sum() > 0  # written in place, one buffer
    assert result.tokens_per_s > 0


def test_per_component_configs_must_name_every_component():
    entry, model = zoo_model("llama")
    with pytest.raises(ValueError, match=r"expected \['decode', 'prefill'\]; missing \['prefill'\]"):
        DynamoExporter().export_for_generation(model, entry.sample_inputs(model), {"decode": DynamoConfig()})


def test_a_failing_component_is_named():
    class Failing(DynamoExporter):
        def export(self, model, sample_inputs, config=None):
            raise HfExportError("boom", stage="export")

    entry, model = zoo_model("llama")
    with pytest.raises(HfExportError, match=r"^\[prefill\] boom") as info:
        Failing().export_for_generation(model, entry.sample_inputs(model))
    assert info.value.component == "prefill"


def test_onnx_runtime_decode_loop_binds_the_cache_in_place(tmp_path):
    from hfexport import OnnxConfig, OnnxExporter

    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)
    config = transformers.GenerationConfig(cache_implementation="static", max_cache_len=32)
    programs = OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True),
                                                    generation_config=config, multi_token_decode=True)
    path = tmp_path / "decode.onnx"
    OnnxExporter.save(programs["decode"], str(path))
    loop = decode_loop(str(path), "onnx", max_cache_len=32)
    buffers = dict(loop.buffers)
    prompt = inputs["input_ids"][:1]
    result = loop.generate(prompt, 16)
    expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=transformers.GenerationConfig(
        max_new_tokens=16, min_new_tokens=16, do_sample=False, cache_implementation="static", max_cache_len=32))
    assert result.tokens == expected[0, prompt.shape[1]:].tolist()
    # the same caller-owned tensors carried the cache through every step
    assert all(loop.buffers[k] is v for k, v in buffers.items())
    assert any(v.abs().sum() > 0 for k, v in buffers.items() if k.endswith("keys"))


@pytest.mark.parametrize("backend", ["dynamo", "onnx"])
def test_exported_components_drive_generate_to_the_eager_tokens(backend, tmp_path):
    """T5 on both backends: encoder + prefill + decode artifacts, loaded from disk, inside the model's own
    generate(). Covers a ModelOutput (encoder_outputs) in saved example inputs and ONNX SDPA with a symbolic
    head axis (T5's view(*shape, -1, head_dim))."""
    from hfexport.runtime.components import ExportedGenerate, eager_greedy_tokens

    entry, model = zoo_model("t5")
    inputs = entry.sample_inputs(model)
    runners = _saved_components(model, inputs, backend, tmp_path)
    generator = ExportedGenerate(model, decompose_for_generation(model, inputs), runners)
    got = generator.generate(inputs, 8)
    assert got.tolist() == eager_greedy_tokens(model, inputs, 8).tolist()
    assert generator.calls == {"encoder": 1, "prefill": 1, "decode": 7}
    assert "forward" not in vars(model) and "forward" not in vars(model.get_encoder())  # originals back


def test_widen_batch_repeats_only_size_one_leading_axes():
    from hfexport.shapes import widen_batch

    inputs = {"input_ids": torch.tensor([[5, 6, 7]]), "pixel_values": torch.ones(1, 3, 2, 2),
              "grid": torch.tensor([[1, 2, 2], [1, 2, 2]]), "flag": True}
    wide = widen_batch(inputs)
    assert wide["input_ids"].tolist() == [[5, 6, 7], [5, 6, 7]]
    assert wide["pixel_values"].shape == (2, 3, 2, 2)
    assert wide["grid"] is inputs["grid"] and wide["flag"] is True


def test_served_cache_carries_the_sliding_layers_token_count():
    """A rebuilt cache's int counters are the sample's (a graph returns no Python ints): serving carries the
    caller's count plus this call's tokens, as eager's update does, so get_seq_length() (and the mask that
    generate() builds from it) stays right past the window (gemma3's served tokens failed on it)."""
    from types import SimpleNamespace as NS

    from hfexport.runtime.components import carry_token_counters

    def cache(*counts):
        return NS(layers=[NS(cumulative_length=c) if c is not None else NS(keys=None) for c in counts])

    before, after = cache(6, None), cache(3, None)  # 3: the count the decode sample was traced at
    carry_token_counters({"input_ids": torch.zeros(1, 1, dtype=torch.long), "past_key_values": before},
                         {"past_key_values": after})
    assert after.layers[0].cumulative_length == 7 and not hasattr(after.layers[1], "cumulative_length")
    prefill = cache(3)
    carry_token_counters({"input_ids": torch.zeros(2, 5, dtype=torch.long), "past_key_values": None},
                         NS(past_key_values=prefill))
    assert prefill.layers[0].cumulative_length == 5


def test_widened_sample_keeps_flattened_patches_with_their_grid_rows():
    """qwen2-vl's pixel_values are the patches of every image, [patches, features], with no batch axis:
    widening repeats them whole, as it repeats the grid rows (16 patches for 2 grid rows failed generate())."""
    from hfexport.shapes import widen_batch

    inputs = {
        "input_ids": torch.ones(1, 10, dtype=torch.long),
        "pixel_values": torch.randn(16, 96),
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
    }
    wide = widen_batch(inputs)
    assert wide["input_ids"].shape == (2, 10) and wide["image_grid_thw"].shape == (2, 3)
    assert wide["pixel_values"].shape == (32, 96)
    assert torch.equal(wide["pixel_values"][16:], inputs["pixel_values"])


# ExecuTorch's variant (46 s, the slowest test of the default run) in the slow tier: the trace it checks is Dynamo's.
@pytest.mark.parametrize("backend", ["dynamo", pytest.param("executorch", marks=pytest.mark.hfexport_slow)])
def test_a_one_token_decoder_prompt_traces_a_decode_graph_for_every_cache_length(backend, tmp_path):
    """T5 prompted with its start token alone (how a user calls generate()): the first decode step's cache holds
    one position, a size-1 axis torch.export specialises; the decode graph is traced from the next step, so it
    serves every cache length and generate() served by the artifacts gives eager's tokens (it refused the second
    step before, 'past_key_values[0].size()[2] == 1'; on ExecuTorch the program expected a cache length of 1)."""
    from hfexport.runtime.components import ExportedGenerate, eager_greedy_tokens

    entry, model = zoo_model("t5")
    inputs = entry.sample_inputs(model)
    inputs["decoder_input_ids"] = inputs["decoder_input_ids"][:, :1]
    runners = _saved_components(model, inputs, backend, tmp_path)
    got = ExportedGenerate(model, decompose_for_generation(model, inputs), runners).generate(inputs, 8)
    assert got.tolist() == eager_greedy_tokens(model, inputs, 8).tolist()


def _saved_components(model, inputs, backend, folder):
    """Every export_for_generation component of ``model`` saved into ``folder`` and loaded back: name -> runner."""
    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.runtime import load

    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    runners = {}
    for name, program in exporter.export_for_generation(model, inputs, config).items():
        exporter.save(program, str(folder / f"{name}{exporter.file_suffix}"))
        runners[name] = load(folder / f"{name}{exporter.file_suffix}")
    return runners

"""Weight quantization through the configs: what each scheme accepts, that the artifact holds the quantized weights
(its size), and that a quantized export, failed or not, leaves the caller's model as it was. Whether the artifact
computes the scheme is the conformance suite's check (``conformance/test_quantization.py``)."""

from __future__ import annotations

import os

import pytest
import torch
import transformers

import hfexport
import hfexport.tracing
from hfexport.model_state import diff_model_state, snapshot_model

BACKENDS = {
    "dynamo": (hfexport.DynamoExporter, hfexport.DynamoConfig, "pt2"),
    "onnx": (hfexport.OnnxExporter, hfexport.OnnxConfig, "onnx"),
    "executorch": (hfexport.ExecutorchExporter, hfexport.ExecutorchConfig, "pte"),
}


def _llama(hidden: int, intermediate: int, layers: int, vocab: int, **fields):
    """A seeded llama of these dimensions (4 heads, 2 KV heads) and an 8-token sample."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab, **fields)
    model = transformers.LlamaForCausalLM(config).eval()
    inputs = {"input_ids": torch.randint(0, vocab, (1, 8)), "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    return model, inputs


def linear_heavy_llama():
    """A llama whose weights are almost all linear layers (hidden 256, vocab 64): artifact sizes show the scheme."""
    return _llama(256, 512, 2, 64)


def _saved_mib(backend: str, model, inputs, folder, **fields) -> tuple[float, object]:
    """(MiB saved, the program)."""
    exporter_cls, config_cls, suffix = BACKENDS[backend]
    program = exporter_cls().export(model, inputs, config=config_cls(**fields))
    files = exporter_cls.save(program, str(folder / f"model-{fields.get('quantization')}.{suffix}"))
    return sum(os.path.getsize(f) for f in files) / 2**20, program


# (backend, scheme) -> the largest artifact size as a fraction of the float32 one: the measured fraction on
# linear_heavy_llama (in the comment) rounded up by 0.01-0.02. A byte per weight is 0.25 and half a byte plus a
# float scale per 32 weights 0.156; the rest is each format's graph and the float norms and embedding. The smallest
# layer (k_proj) left float adds about 0.02.
SIZE_BOUND = {
    ("dynamo", "int8"): 0.33,  # 0.317
    ("onnx", "int8"): 0.31,  # 0.299
    ("onnx", "int4"): 0.20,  # 0.182
    ("executorch", "int8"): 0.29,  # 0.274
    ("executorch", "8da4w"): 0.18,  # 0.162
    ("executorch", "8da8w"): 0.29,  # 0.272
}


# The ExecuTorch schemes whose every linear must run inside XNNPACK: int8 leaves each one to the portable kernels, on
# its weight converted to float every call (0.19x eager at real size, docs/performance.md).
INSIDE_THE_DELEGATE = ("8da4w", "8da8w")


def _matmuls_outside_the_delegate(program) -> list[str]:
    targets = [str(n.target) for n in program.exported_program().graph.nodes if n.op == "call_function"]
    return [t for t in targets if t.startswith("aten.") and t.split(".")[1] in ("mm", "addmm", "bmm", "linear")]


@pytest.mark.parametrize("backend,scheme", sorted(SIZE_BOUND), ids=[f"{b}-{s}" for b, s in sorted(SIZE_BOUND)])
def test_the_artifact_holds_the_quantized_weights(backend, scheme, tmp_path):
    model, inputs = linear_heavy_llama()
    snapshot = snapshot_model(model)
    with torch.no_grad():
        before = model(**inputs).logits
    full, _ = _saved_mib(backend, model, inputs, tmp_path, dynamic=False)
    quantized, program = _saved_mib(backend, model, inputs, tmp_path, dynamic=False, quantization=scheme)
    assert quantized <= SIZE_BOUND[backend, scheme] * full, (quantized, full)
    if scheme in INSIDE_THE_DELEGATE:
        assert _matmuls_outside_the_delegate(program) == [], f"{scheme} left matrix products to portable kernels"
    assert diff_model_state(model, snapshot) == []
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, before), "the quantized export changed the caller's model"


def tied_llama():
    """A llama whose head is its embedding table (vocab 4096 x hidden 64: the table is most of the weights)."""
    return _llama(64, 128, 1, 4096, tie_word_embeddings=True)


def test_int4_stores_a_tied_table_once_and_looks_it_up_in_int4(tmp_path):
    """The head's MatMulNBits weight is the table GatherBlockQuantized reads: no float table, no second copy."""
    import onnx

    model, inputs = tied_llama()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    snapshot, table = snapshot_model(model), model.lm_head.weight
    full, _ = _saved_mib("onnx", model, inputs, tmp_path, dynamic=False)
    quantized, _ = _saved_mib("onnx", model, inputs, tmp_path, dynamic=False, quantization="int4")
    assert diff_model_state(model, snapshot) == [] and model.model.embed_tokens.weight is table is model.lm_head.weight
    graph = onnx.load(str(tmp_path / "model-int4.onnx")).graph
    tables = [i for i in graph.initializer if 4096 in i.dims]
    assert [(i.data_type, list(i.dims)) for i in tables] == [
        (onnx.TensorProto.UINT8, [4096, 2, 16]),
        (onnx.TensorProto.FLOAT, [4096, 2]),
    ], "the tied table is stored once, as the head's int4 weight and scales"
    lookups = [n for n in graph.node if n.op_type in ("Gather", "GatherBlockQuantized") and n.input[0] != "input_ids"]
    assert [n.op_type for n in lookups] == ["GatherBlockQuantized"]
    # Half a byte and a float scale per 32 values is 0.156 of float32; the rest is the graph. A second int4 copy of
    # the table (0.88 of the weights) would add 0.14, a float one 0.88.
    assert quantized <= 0.22 * full, (quantized, full)  # 0.211 measured


@pytest.mark.parametrize("backend,scheme", [("dynamo", "int8"), ("onnx", "int4")], ids=["dynamo-int8", "onnx-int4"])
def test_a_failed_quantized_export_leaves_every_parameter_in_place(backend, scheme, monkeypatch):
    """int8 swaps the linear layers for the trace, int4 the embedding tables (tied heads with them)."""
    model, inputs = tied_llama()
    modules = dict(model.named_modules())
    parameters = {
        (name, attribute): parameter
        for name, module in modules.items()
        for attribute, parameter in module._parameters.items()
    }

    def failing(*args, **kwargs):
        raise RuntimeError("lowering failed")

    monkeypatch.setattr(hfexport.tracing.Trace, "export_once", failing)
    exporter_cls, config_cls, _ = BACKENDS[backend]
    with pytest.raises(RuntimeError, match="lowering failed"):
        exporter_cls().export(model, inputs, config=config_cls(quantization=scheme))
    assert dict(model.named_modules()) == modules
    after = {(n, a): p for n, m in modules.items() for a, p in m._parameters.items()}
    assert after.keys() == parameters.keys() and all(after[k] is parameters[k] for k in parameters)
    assert model.lm_head.weight is model.model.embed_tokens.weight


@pytest.mark.parametrize(
    "config,message",
    [
        (
            lambda: hfexport.DynamoConfig(quantization="int5"),
            "not a scheme; schemes: \\['8da4w', '8da8w', 'int4', 'int8'\\]",
        ),
        (lambda: hfexport.DynamoConfig(quantization="int4"), "is for onnx, not dynamo; on dynamo choose one of"),
        (lambda: hfexport.OnnxConfig(quantization="8da4w"), "is for executorch, not onnx"),
        (lambda: hfexport.DynamoConfig(quantization="int8", quantization_group_size=32), "leave quantization_group"),
        (lambda: hfexport.OnnxConfig(quantization="int4", quantization_group_size=3), "an even int >= 2"),
        (lambda: hfexport.OnnxConfig(quantization_group_size=32), "quantization is None; name a scheme"),
        (lambda: hfexport.OnnxConfig(quantization="int4", optimize=False), "it needs optimize=True"),
        (lambda: hfexport.ExecutorchConfig(quantization="8da4w", backend="portable"), "set backend='xnnpack'"),
        (lambda: hfexport.ExecutorchConfig(quantization="8da8w", quantization_group_size=32), "leave quantization_g"),
    ],
)
def test_a_scheme_the_backend_cannot_carry_is_refused_with_what_to_do(config, message):
    with pytest.raises(ValueError, match=message):
        config()


def test_quantization_round_trips_through_a_dict():
    config = hfexport.OnnxConfig(quantization="int4", quantization_group_size=64)
    assert hfexport.AutoExportConfig.from_dict(config.to_dict()) == config


def test_the_components_of_one_int4_export_share_each_quantized_table():
    """export_for_generation quantizes a table once for all its components (a copy per component program was
    113 MiB more peak memory per component at SmolLM2's size); the next export quantizes it afresh."""
    model, inputs = tied_llama()
    config = hfexport.OnnxConfig(dynamic=True, quantization="int4")
    programs = hfexport.OnnxExporter().export_for_generation(model, inputs, config)

    def table_of(program):  # the one tensor behind the tied names
        (table,) = {id(t): t for t in program.exported_program.state_dict.values() if 4096 in t.shape}.values()
        return table

    assert sorted(programs) == ["decode", "prefill"]
    prefill, decode = table_of(programs["prefill"]), table_of(programs["decode"])
    assert prefill is decode and prefill is not model.lm_head.weight
    other = table_of(hfexport.OnnxExporter().export(model, inputs, config=config))
    assert other is not prefill and torch.equal(other, prefill)

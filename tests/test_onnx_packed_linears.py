"""Linear layers that read one input run as one MatMul on ONNX (``hfexport/patching/onnx_packed_linears.py``): the
same bits as the separate products, every member still named for the locator."""

import collections
import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers

from hfexport import OnnxConfig, OnnxExporter, speedups_off
from hfexport.patching import onnx_packed_linears
from pytest_hfexport.module_values import onnx_module_values

LAYERS = 2


def _llama():
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 7))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _export(model, inputs, path, **fields):
    program = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True, **fields))
    path.write_bytes(program.model_proto.SerializeToString())
    return path


def _run(path, inputs) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {name: value.numpy() for name, value in inputs.items()})


def _products(path) -> collections.Counter:
    """Matrix products by a constant weight (attention's products of two activations left out), by op type."""
    graph = onnx.load(str(path)).graph
    constants = {i.name for i in graph.initializer}
    return collections.Counter(
        n.op_type for n in graph.node if n.op_type.startswith("MatMul") and n.input[1] in constants
    )


@pytest.mark.parametrize("quantization", [None, "int4"])
def test_packed_products_equal_the_separate_ones_bit_for_bit(quantization, tmp_path):
    model, inputs = _llama()
    fields = {"quantization": quantization} if quantization else {}
    packed = _export(model, inputs, tmp_path / "packed.onnx", **fields)
    with speedups_off():
        separate = _export(model, inputs, tmp_path / "separate.onnx", **fields)
    op = "MatMulNBits" if quantization else "MatMul"
    # per layer: q/k/v as one product, o, gate/up as one, down (4, from 7); the head
    assert _products(packed)[op] == 4 * LAYERS + 1
    assert _products(separate)[op] == 7 * LAYERS + 1
    for got, expected in zip(_run(packed, inputs), _run(separate, inputs), strict=True):
        np.testing.assert_array_equal(got, expected)


def _columns_of_the_last_two_swapped(graph, members):
    """A packing fault: the last two members (key and value, gate and up: same shapes) read each other's columns."""
    first, second = members[-2].inputs[1], members[-1].inputs[1]
    members[-2].replace_input_with(1, second)
    members[-1].replace_input_with(1, first)
    return ORIGINAL_PACK(graph, members)


ORIGINAL_PACK = onnx_packed_linears._pack


def test_members_swapped_in_the_packed_weight_are_caught(tmp_path, monkeypatch):
    """The bit-for-bit comparison above fails a packing whose slices read another member's columns."""
    monkeypatch.setattr(onnx_packed_linears, "_pack", _columns_of_the_last_two_swapped)
    model, inputs = _llama()
    wrong = _export(model, inputs, tmp_path / "wrong.onnx")
    monkeypatch.undo()
    with speedups_off():
        separate = _export(model, inputs, tmp_path / "separate.onnx")
    assert not np.array_equal(_run(wrong, inputs)[0], _run(separate, inputs)[0])


def test_the_locator_still_reads_each_members_output(tmp_path):
    model, inputs = _llama()
    path = _export(model, inputs, tmp_path / "packed.onnx")
    values = onnx_module_values(path, copy.deepcopy(inputs))
    eager = {}
    hooks = [
        module.register_forward_hook(lambda m, args, out, name=name: eager.setdefault(name, out.detach()))
        for name, module in model.named_modules()
        if name.startswith("model.layers.0.") and isinstance(module, torch.nn.Linear)
    ]
    with torch.no_grad():
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert len(eager) == 7 and set(eager) <= set(values), sorted(values)
    for name, expected in eager.items():
        (got,) = values[name]
        # the ONNX float32 tolerance (conformance/tolerances.py)
        np.testing.assert_allclose(np.asarray(got), expected.numpy(), atol=4.8e-6, rtol=1.7e-4, err_msg=name)

"""RMS norms reach ONNX Runtime in the form it fuses (``hfexport/patching/onnx_rms_norm.py``), with the same
outputs."""

import collections

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

from hfexport import OnnxConfig, OnnxExporter
from hfexport.patching import onnx_fixes, onnx_rms_norm

LAYERS = 2


def _llama_export(tmp_path):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 7))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    program = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    path = tmp_path / "model.onnx"
    path.write_bytes(program.model_proto.SerializeToString())
    return model, inputs, path


def _fused_norms(path, tmp_path) -> int:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    kinds = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    return kinds["SimplifiedLayerNormalization"] + kinds["SkipSimplifiedLayerNormalization"]


def test_every_rms_norm_runs_as_one_fused_kernel_with_the_same_logits(tmp_path):
    model, inputs, path = _llama_export(tmp_path)
    assert _fused_norms(path, tmp_path) == 2 * LAYERS + 1
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {name: value.numpy() for name, value in inputs.items()}
    (got,) = session.run(["logits"], feed)
    with torch.no_grad():
        expected = model(**inputs).logits
    # the ONNX float32 tolerance (conformance/tolerances.py); 1.8e-7 measured
    np.testing.assert_allclose(got, expected.numpy(), atol=4.8e-6, rtol=1.7e-4)


def test_without_the_fix_no_norm_is_fused(tmp_path, monkeypatch):
    kept = [f for f in onnx_fixes.ONNX_IR_FIXES if f.fn is not onnx_rms_norm._rms_norm_as_a_quotient]
    assert len(kept) == len(onnx_fixes.ONNX_IR_FIXES) - 1
    monkeypatch.setattr(onnx_fixes, "ONNX_IR_FIXES", kept)
    _, _, path = _llama_export(tmp_path)
    assert _fused_norms(path, tmp_path) == 0

"""A tied embedding is stored once in an ONNX export (``hfexport/patching/onnx_tied_weights.py``), with the same
outputs; an untied one keeps both matrices."""

import numpy as np
import onnxruntime as ort
import torch
import transformers

from hfexport import OnnxConfig, OnnxExporter
from hfexport.patching import onnx_fixes, onnx_tied_weights

VOCAB, HIDDEN = 512, 64


def llama(tied: bool) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def vocabulary_matrices(program) -> list[str]:
    return [name for name, v in program.model.graph.initializers.items() if v.shape is not None and VOCAB in v.shape]


def export(model):
    ids = torch.randint(0, VOCAB, (1, 6))
    return OnnxExporter().export(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                 OnnxConfig(dynamic=True))


def test_a_tied_embedding_is_stored_once_and_serves_the_same_logits():
    model = llama(tied=True)
    program = export(model)
    assert len(vocabulary_matrices(program)) == 1
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    for shape in [(1, 6), (3, 9), (2, 1)]:
        ids = torch.randint(0, VOCAB, shape)
        (got,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": np.ones(shape, np.int64)})
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-5, rtol=1e-4)


def test_without_the_fix_the_matrix_is_stored_twice(monkeypatch):
    kept = [f for f in onnx_fixes.ONNX_IR_FIXES if f.fn is not onnx_tied_weights._tied_embedding_stored_once]
    assert len(kept) == len(onnx_fixes.ONNX_IR_FIXES) - 1
    monkeypatch.setattr(onnx_fixes, "ONNX_IR_FIXES", kept)
    assert len(vocabulary_matrices(export(llama(tied=True)))) == 2


def test_an_untied_embedding_keeps_both_matrices():
    assert len(vocabulary_matrices(export(llama(tied=False)))) == 2


def test_a_tied_int4_export_looks_up_the_quantized_head_and_keeps_no_float_matrix():
    """int4 replaces the head's MatMul by MatMulNBits and the lookup by GatherBlockQuantized on the same packed
    weight: the vocabulary matrices left are that weight and its scales, and the program still serves logits."""
    model = llama(tied=True)
    ids = torch.randint(0, VOCAB, (1, 6))
    program = OnnxExporter().export(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                    OnnxConfig(dynamic=True, quantization="int4"))
    initializers = program.model.graph.initializers
    assert sorted(str(initializers[n].dtype) for n in vocabulary_matrices(program)) == ["FLOAT", "UINT8"]
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    (got,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": np.ones((1, 6), np.int64)})
    assert np.isfinite(got).all() and got.shape == (1, 6, VOCAB)

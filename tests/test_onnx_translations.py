"""hfexport's ONNX translations (attention with one broadcast key/value head, attention as MatMul/Softmax,
squeeze of a wide axis) against torch's, and the thread pools of ONNX Runtime sessions."""

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


class _MultiQueryAttention(torch.nn.Module):
    """Falcon's multi-query attention: one key/value head that SDPA broadcasts over every query head."""

    def forward(self, query, key, value, mask):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)


def _multi_query_sample():
    torch.manual_seed(0)
    mask = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
    return {"query": torch.randn(1, 4, 6, 8), "key": torch.randn(1, 1, 6, 8), "value": torch.randn(1, 1, 6, 8),
            "mask": mask}


def test_sdpa_with_one_broadcast_key_value_head_translates_and_matches():
    sample = _multi_query_sample()
    program = OnnxExporter().export(_MultiQueryAttention(), sample, OnnxConfig(dynamic=True))
    run = OrtRunner(program)
    torch.manual_seed(1)
    other = {"query": torch.randn(2, 4, 9, 8), "key": torch.randn(2, 1, 9, 8), "value": torch.randn(2, 1, 9, 8),
             "mask": torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()}
    other["mask"][0, :, :, :3] = False  # left padding: the first three query rows of row 0 see nothing (zeros)
    for feed in (sample, other):
        torch.testing.assert_close(run.run_flat(feed)["output"], _MultiQueryAttention()(**feed), atol=1e-5, rtol=1e-4)


def test_without_the_broadcast_case_torchs_translation_refuses_one_key_value_head(monkeypatch):
    from hfexport.patching import onnx_fixes

    monkeypatch.setattr(onnx_fixes, "ONNX_TRANSLATIONS",
                        [t for t in onnx_fixes.ONNX_TRANSLATIONS if "scaled_dot_product" not in str(t.target)])
    with pytest.raises(HfExportError, match="q_num_heads = kv_num_heads|scaled_dot_product_attention"):
        OnnxExporter().export(_MultiQueryAttention(), _multi_query_sample(), OnnxConfig(dynamic=True))


def test_sdpa_is_written_as_matmul_and_softmax_not_the_attention_op_ort_runs_as_a_function():
    """ONNX Runtime 1.32's CPU provider runs opset 23's Attention op as its expanded function body (about 60 nodes
    each); written as MatMul/Softmax the decode benchmark ran 1.8x faster. Same result, padded rows included."""
    torch.manual_seed(0)
    sample = {"query": torch.randn(1, 4, 6, 8), "key": torch.randn(1, 4, 6, 8), "value": torch.randn(1, 4, 6, 8),
              "mask": torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()}
    program = OnnxExporter().export(_MultiQueryAttention(), sample, OnnxConfig(dynamic=True))
    ops = {node.op_type for node in program.model.graph}
    assert "Attention" not in ops and {"MatMul", "Softmax"} <= ops, ops
    other = {"query": torch.randn(2, 4, 9, 8), "key": torch.randn(2, 4, 9, 8), "value": torch.randn(2, 4, 9, 8),
             "mask": torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()}
    other["mask"][0, :, :, :3] = False
    run = OrtRunner(program)
    for feed in (sample, other):
        torch.testing.assert_close(run.run_flat(feed)["output"], _MultiQueryAttention()(**feed), atol=1e-5, rtol=1e-4)


class _SqueezeWideAxis(torch.nn.Module):
    """ParakeetForRNNT's joint output: squeeze(2) of an axis that is not 1 leaves the tensor unchanged in torch."""

    def forward(self, hidden):
        return (hidden * 2).squeeze(2).squeeze(-1)


def _squeeze_sample():
    return {"hidden": torch.randn(2, 5, 3, 1)}


def test_squeeze_of_an_axis_that_is_not_one_is_a_no_op_in_onnx_too():
    sample = _squeeze_sample()
    program = OnnxExporter().export(_SqueezeWideAxis(), sample, OnnxConfig(dynamic=False))
    out = OrtRunner(program).run_flat(sample)["output"]
    torch.testing.assert_close(out, _SqueezeWideAxis()(**sample))
    assert out.shape == (2, 5, 3)


def test_without_the_squeeze_translation_ort_refuses_the_model(monkeypatch, tmp_path):
    from hfexport.patching import onnx_fixes

    monkeypatch.setattr(onnx_fixes, "ONNX_TRANSLATIONS",
                        [t for t in onnx_fixes.ONNX_TRANSLATIONS if "squeeze" not in str(t.target)])
    program = OnnxExporter().export(_SqueezeWideAxis(), _squeeze_sample(), OnnxConfig(dynamic=False))
    with pytest.raises(Exception, match="must be 1|Squeeze"):
        OrtRunner(program).run_flat(_squeeze_sample())


def _identity_onnx_bytes() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("threads", [1, 3])
def test_ort_sessions_size_their_thread_pool_like_torch(threads):
    """A process that shares its cores sets torch's thread count; hfexport's sessions and the plugin's follow it."""
    import onnx

    from hfexport.runtime.onnxruntime import OrtRunner
    from pytest_hfexport.worker_threads import ort_session_options

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runner = OrtRunner(onnx.load_from_string(_identity_onnx_bytes()))
        assert runner.session.get_session_options().intra_op_num_threads == threads
        assert ort_session_options().intra_op_num_threads == threads
    finally:
        torch.set_num_threads(before)

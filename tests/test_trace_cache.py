"""The fake-tensor cache is off while a shallow model is traced, on for a deep one and on ExecuTorch, and torch's
setting is what it was after every export, failed ones included."""

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter, ExecutorchConfig, HfExportError, OnnxConfig, OnnxExporter
from hfexport.executorch import ExecutorchExporter
from hfexport.trace_cache import CACHE_FROM_REPEATED_BLOCKS, repeated_blocks

from helpers import tiny_llama as llama


def cache_setting_seen_by_the_trace(exporter, model, inputs, config):
    """torch's fake-tensor cache setting while the first decoder layer was traced."""
    seen = []
    hook = model.model.layers[0].register_forward_pre_hook(
        lambda module, args: seen.append(torch._dynamo.config.fake_tensor_cache_enabled))
    try:
        exporter.trace(model, inputs, config)
    finally:
        hook.remove()
    assert seen, "the hook never ran: the trace did not call the first layer"
    return set(seen)


@pytest.mark.parametrize("exporter, config", [(DynamoExporter(), DynamoConfig(dynamic=True)),
                                              (OnnxExporter(), OnnxConfig(dynamic=True))], ids=["dynamo", "onnx"])
def test_a_shallow_model_is_traced_without_the_cache_and_a_deep_one_with_it(exporter, config):
    threshold = CACHE_FROM_REPEATED_BLOCKS[(config.export_format.value, False)]
    assert threshold > 2
    shallow, deep = llama(2), llama(threshold)
    assert repeated_blocks(shallow[0]) == 2 and repeated_blocks(deep[0]) == threshold
    assert cache_setting_seen_by_the_trace(exporter, *shallow, config) == {False}
    assert cache_setting_seen_by_the_trace(exporter, *deep, config) == {True}


def test_executorch_whose_decompositions_replay_the_cache_traces_even_a_shallow_model_with_it():
    model, inputs = llama(2)
    assert cache_setting_seen_by_the_trace(ExecutorchExporter(), model, inputs, ExecutorchConfig(dynamic=True)) == {True}


def test_onnx_traces_a_shallow_model_given_a_cache_without_it():
    """The decompositions functionalise the cache writes into other calls: nothing is replayed (see trace_cache)."""
    model, inputs = llama(2)
    with torch.no_grad():
        past = model(**inputs, use_cache=True).past_key_values
    step = {"input_ids": torch.randint(0, 64, (2, 1)), "attention_mask": torch.ones(2, 6, dtype=torch.long),
            "past_key_values": past}
    assert CACHE_FROM_REPEATED_BLOCKS[("onnx", True)] > 2
    assert cache_setting_seen_by_the_trace(OnnxExporter(), model, step, OnnxConfig(dynamic=True)) == {False}


@pytest.mark.parametrize("before", [True, False])
def test_torch_setting_comes_back_after_an_export_and_after_a_failed_one(before):
    model, inputs = llama(2)
    with torch._dynamo.config.patch(fake_tensor_cache_enabled=before):
        DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
        assert torch._dynamo.config.fake_tensor_cache_enabled is before

        def broken(*args, **kwargs):
            raise RuntimeError("a layer that cannot be traced")

        model.model.layers[1].mlp.forward = broken
        with pytest.raises(HfExportError):
            DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
        assert torch._dynamo.config.fake_tensor_cache_enabled is before

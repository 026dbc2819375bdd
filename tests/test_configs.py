"""Configs: defaults, validation, and lossless dict/JSON round trips."""

import json

import pytest
import torch
from torch.export import Dim

from hfexport import (AutoExportConfig, DynamoConfig, ExecutorchConfig, ExportConfigMixin, ExportFormat,
                      OnnxConfig)


def test_defaults_match_the_spec():
    d = DynamoConfig()
    assert (d.dynamic, d.strict, d.dynamic_shapes, d.prefer_deferred_runtime_asserts_over_guards) == (False, False, None, False)
    o = OnnxConfig()
    assert (o.output_path, o.opset_version, o.external_data, o.optimize, o.export_params,
            o.keep_initializers_as_inputs) == (None, None, True, True, True, False)
    e = ExecutorchConfig()
    assert (e.backend, e.alloc_graph_input, e.alloc_graph_output, e.alloc_mutable_buffers) == ("xnnpack", True, True, True)
    assert d.export_format is ExportFormat.DYNAMO and o.export_format is ExportFormat.ONNX
    assert e.export_format is ExportFormat.EXECUTORCH


@pytest.mark.parametrize("config", [
    DynamoConfig(dynamic=True, strict=True),
    OnnxConfig(dynamic=True, opset_version=18, external_data=False, optimize=False, output_path="m.onnx"),
    ExecutorchConfig(backend="portable", alloc_graph_input=False, alloc_mutable_buffers=False),
])
def test_dict_and_json_round_trip(config):
    data = config.to_dict()
    assert data["export_format"] == str(config.export_format)
    back = ExportConfigMixin.from_dict(data)
    assert type(back) is type(config) and back == config
    assert back.export_format is config.export_format  # the enum comes back, not a string
    assert type(config).from_json_string(config.to_json_string()) == config
    assert AutoExportConfig.from_dict(json.loads(json.dumps(data))) == config


def test_explicit_dynamic_shapes_survive_the_round_trip():
    batch, seq = Dim("batch", min=1, max=32), Dim("seq", min=1, max=2048)
    config = DynamoConfig(dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": (Dim.AUTO, Dim.STATIC),
                                          "pixel_values": None})
    back = DynamoConfig.from_json_string(config.to_json_string())
    ids = back.dynamic_shapes["input_ids"]
    assert set(ids) == {0, 1}
    assert (ids[0].__name__, ids[0].min, ids[0].max) == ("batch", 1, 32)
    assert (ids[1].__name__, ids[1].min, ids[1].max) == ("seq", 1, 2048)
    assert back.dynamic_shapes["attention_mask"] == (Dim.AUTO, Dim.STATIC)
    assert back.dynamic_shapes["pixel_values"] is None
    assert back == config


def test_unserialisable_dynamic_shapes_are_refused_clearly():
    batch = Dim("batch", min=1, max=8)
    config = DynamoConfig(dynamic_shapes={"x": {0: 2 * batch}})
    with pytest.raises(ValueError, match="derived"):
        config.to_dict()
    with pytest.raises(ValueError, match="lossless"):
        DynamoConfig(dynamic_shapes={"x": {0: object()}}).to_dict()


@pytest.mark.parametrize("make, match", [
    (lambda: DynamoConfig(dynamic="yes"), "dynamic must be True or False"),
    (lambda: DynamoConfig(dynamic_shapes=3), "dynamic_shapes must be a dict"),
    (lambda: OnnxConfig(opset_version=9), "opset 18 or newer"),
    (lambda: OnnxConfig(opset_version="18"), "opset_version must be an int"),
    (lambda: ExecutorchConfig(backend="tpu"), "choose one of"),
    (lambda: ExecutorchConfig(alloc_graph_input=0), "alloc_graph_input must be True or False"),
])
def test_invalid_values_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_from_dict_rejects_unknown_fields_and_wrong_format():
    with pytest.raises(ValueError, match="no field"):
        AutoExportConfig.from_dict({"export_format": "onnx", "dynamik": True})
    with pytest.raises(ValueError, match="export_format='dynamo'"):
        DynamoConfig.from_dict({"export_format": "onnx"})
    with pytest.raises(ValueError, match="known formats"):
        AutoExportConfig.from_dict({"export_format": "tflite"})


def test_from_dict_accepts_a_live_dynamic_shapes_spec():
    batch = Dim("batch", min=1, max=4)
    config = DynamoConfig.from_dict({"export_format": "dynamo", "dynamic_shapes": {"input_ids": {0: batch}}})
    assert config.dynamic_shapes["input_ids"][0] is batch

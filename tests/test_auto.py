"""Auto classes and the registries: dispatch, errors, and a third-party backend."""

import dataclasses
from typing import ClassVar

import pytest

from hfexport import (AUTO_EXPORTER_MAPPING, AutoExportConfig, AutoHfExporter, DynamoConfig, DynamoExporter,
                      ExecutorchExporter, HfExporter, OnnxConfig, OnnxExporter, register_export_config,
                      register_exporter)
from hfexport.auto import AUTO_CONFIG_MAPPING


def test_guide_example_dispatches_to_onnx():
    config = AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})
    assert isinstance(config, OnnxConfig) and config.dynamic is True
    assert isinstance(AutoHfExporter.from_config(config), OnnxExporter)


def test_mapping_holds_the_three_backends():
    assert AUTO_EXPORTER_MAPPING["dynamo"] is DynamoExporter
    assert AUTO_EXPORTER_MAPPING["onnx"] is OnnxExporter
    assert AUTO_EXPORTER_MAPPING["executorch"] is ExecutorchExporter


def test_unknown_format_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"known formats: \['dynamo', 'executorch', 'onnx'"):
        AutoHfExporter.from_config("tflite")


def test_registration_requires_the_right_base_class():
    with pytest.raises(TypeError, match="HfExporter"):
        register_exporter("bogus")(object)
    with pytest.raises(TypeError, match="ExportConfigMixin"):
        register_export_config("bogus")(dict)
    assert "bogus" not in AUTO_EXPORTER_MAPPING and "bogus" not in AUTO_CONFIG_MAPPING


def test_a_third_party_backend_plugs_in():
    @register_export_config("toy")
    @dataclasses.dataclass(eq=False)
    class ToyConfig(DynamoConfig):
        export_format: ClassVar[str] = "toy"
        level: int = 1

    @register_exporter("toy")
    class ToyExporter(HfExporter):
        export_format = "toy"
        config_class = ToyConfig

        def export(self, model, sample_inputs, config=None):
            return ("toy", self.resolve_config(config).level)

    try:
        config = AutoExportConfig.from_dict({"export_format": "toy", "level": 3})
        assert config == ToyConfig(level=3)
        assert AutoHfExporter.from_config(config).export(None, {}, config) == ("toy", 3)
        assert AutoExportConfig.from_dict(config.to_dict()) == config
    finally:
        AUTO_EXPORTER_MAPPING.pop("toy")
        AUTO_CONFIG_MAPPING.pop("toy")


def test_an_exporter_refuses_a_config_of_another_backend():
    with pytest.raises(TypeError, match="AutoHfExporter.from_config"):
        DynamoExporter().resolve_config(OnnxConfig())
    assert DynamoExporter().resolve_config({"dynamic": True}) == DynamoConfig(dynamic=True)

"""Fault: the ONNX exporter raises NotImplementedError without declaring the gap (HFEXPORT_LACKS)."""

import hfexport

from faults._base import with_faults


class NoOnnx(hfexport.OnnxExporter):
    def export(self, model, sample_inputs, config=None):
        raise NotImplementedError("this implementation has no ONNX export")


with_faults(globals(), exporters={"onnx": NoOnnx})

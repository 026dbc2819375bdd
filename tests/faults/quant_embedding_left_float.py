"""Fault: int4 leaves every embedding table float while the scheme quantizes them, as a quantizer that knows only
MatMul would: the artifact's linear layers are MatMulNBits, its lookups plain Gathers on the float tables."""

import dataclasses
from unittest import mock

from faults._base import each_backend, with_faults

import hfexport.onnx_int4 as onnx_int4
import hfexport.quantization as quantization


class EmbeddingsLeftFloat:
    def export(self, model, sample_inputs, config=None):
        linears_only = dataclasses.replace(quantization.SCHEMES["int4"], eager=None)
        with (
            mock.patch.dict(quantization.SCHEMES, {"int4": linears_only}),
            mock.patch.object(onnx_int4, "_is_embedding_lookup", lambda node: False),
            mock.patch.object(onnx_int4, "_moves_first_axis_last", lambda node: None),
        ):
            return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(EmbeddingsLeftFloat))

"""Fault: int8 drops the per-channel scales for one scale per weight tensor (its largest), a classic slip that
still "quantizes to int8": every channel with smaller weights loses resolution."""

import contextlib
from unittest import mock

import torch
from faults._base import each_backend, with_faults

import hfexport.quantization as quantization

_per_channel = quantization._int8_linear_class


def _per_tensor_class():
    per_channel = _per_channel()

    class PerTensor(per_channel):
        def __init__(self, linear):
            super().__init__(linear)
            scale = self.weight_scale.max()
            weight = linear.weight.detach()
            self.weight_int8 = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
            self.weight_scale = scale.expand_as(self.weight_scale).clone()

    return PerTensor


class PerTensorScale:
    def export(self, model, sample_inputs, config=None):
        patch = mock.patch.object(quantization, "_int8_linear_class", _per_tensor_class)
        with patch if getattr(config, "quantization", None) == "int8" else contextlib.nullcontext():
            return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(PerTensorScale))

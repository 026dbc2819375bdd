"""Fault: int8 leaves the LM head float while the config (and the artifact's name) claims every linear layer is
int8, as a quantizer with a too-broad skip list would."""

from unittest import mock

from faults._base import each_backend, with_faults

import hfexport.quantization as quantization

_linears = quantization._linears


def _all_but_the_head(model):
    return ((parent, name, linear) for parent, name, linear in _linears(model) if name != "lm_head")


class HeadLeftFloat:
    def export(self, model, sample_inputs, config=None):
        with mock.patch.object(quantization, "_linears", _all_but_the_head):
            return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(HeadLeftFloat))

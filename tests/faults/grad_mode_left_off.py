"""Fault: the export turns grad mode off for the whole process and never turns it back on."""

import torch

from faults._base import each_backend, with_faults


class GradOff:
    def export(self, model, sample_inputs, config=None):
        torch.set_grad_enabled(False)
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(GradOff))

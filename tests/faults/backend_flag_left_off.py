"""Fault: the export turns oneDNN (mkldnn) off and float32 matmul precision down, and restores neither."""

import torch

from faults._base import each_backend, with_faults


class LeavesFlags:
    def export(self, model, sample_inputs, config=None):
        torch.backends.mkldnn.enabled = False
        torch.set_float32_matmul_precision("medium")
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(LeavesFlags))

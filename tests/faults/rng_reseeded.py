"""Fault: the export reseeds torch's global random generator (a caller's seeded run is no longer reproducible)."""

import torch

from faults._base import each_backend, with_faults


class Reseeds:
    def export(self, model, sample_inputs, config=None):
        torch.manual_seed(0)
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(Reseeds))

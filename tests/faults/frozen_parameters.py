"""Fault: the export sets requires_grad=False on every parameter and leaves it (the caller can no longer train)."""

from faults._base import each_backend, with_faults


class Freezes:
    def export(self, model, sample_inputs, config=None):
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(Freezes))

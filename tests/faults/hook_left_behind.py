"""Fault: the export leaves a forward hook registered on the model."""

from faults._base import each_backend, with_faults


class LeavesHook:
    def export(self, model, sample_inputs, config=None):
        model.register_forward_hook(lambda module, args, output: None)
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(LeavesHook))

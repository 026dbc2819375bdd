"""Fault: the export writes into the caller's input tensors (it masks the first token of every row)."""

from faults._base import each_backend, with_faults


class TouchesInputs:
    def export(self, model, sample_inputs, config=None):
        mask = sample_inputs.get("attention_mask")
        if mask is not None:
            mask[:, :1] = 0
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(TouchesInputs))

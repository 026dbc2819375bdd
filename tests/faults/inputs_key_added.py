"""Fault: the export adds a key to the caller's input dict (``use_cache=False``, as a helper that 'fixes up'
inputs would): the next call with that dict runs the model differently. Hygiene must see the caller's mapping."""

from faults._base import each_backend, with_faults


class KeyAdded:
    def export(self, model, sample_inputs, config=None):
        program = super().export(model, sample_inputs, config)
        sample_inputs.setdefault("use_cache", False)
        return program


with_faults(globals(), exporters=each_backend(KeyAdded))

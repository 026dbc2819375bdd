"""Fault: dynamic=True is ignored; the program is traced static (it refuses any other size)."""

import dataclasses

from faults._base import each_backend, with_faults


class IgnoresDynamic:
    def export(self, model, sample_inputs, config=None):
        config = self.resolve_config(config)
        return super().export(model, sample_inputs, dataclasses.replace(config, dynamic=False, dynamic_shapes=None))


with_faults(globals(), exporters=each_backend(IgnoresDynamic))

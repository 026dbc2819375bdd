"""Fault: the exporter drops explicit ``dynamic_shapes`` (Dim ranges) and exports every axis ``Dim.AUTO``."""

import dataclasses

from faults._base import each_backend, with_faults


class IgnoresRanges:
    def export(self, model, sample_inputs, config=None):
        config = self.resolve_config(config)
        if config.dynamic_shapes is not None:
            config = dataclasses.replace(config, dynamic_shapes=None, dynamic=True)
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(IgnoresRanges))

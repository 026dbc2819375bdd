"""Fault: grouped quantization (int4, 8da4w) runs with twice the group size the config asks for, as an exporter
that reads the wrong default would: the artifact holds another quantization than the one it claims."""

from faults._base import each_backend, with_faults


class WrongGroupSize:
    def export(self, model, sample_inputs, config=None):
        if config is not None and config.quantization in ("int4", "8da4w"):
            config = config.replace(quantization_group_size=2 * (config.quantization_group_size or 32))
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(WrongGroupSize))

"""Fault: ``8da8w`` exports as weight-only ``int8``, as an exporter that maps every 8-bit scheme onto one would:
int8 weights (with int8's ``max|w| / 127`` scale) and float activations, not the per-token int8 activations the
scheme claims."""

from faults._base import each_backend, with_faults


class ActivationsLeftFloat:
    def export(self, model, sample_inputs, config=None):
        if config is not None and config.quantization == "8da8w":
            config = config.replace(quantization="int8")
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(ActivationsLeftFloat))

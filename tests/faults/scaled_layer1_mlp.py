"""Fault: the exported program's layer-1 MLP output is 2% too large (a wrong scale folded into one layer), on every
backend. The suite must fail the plain export of a decoder on each: an error inside one layer is orders of
magnitude above float32 reordering, however small next to the outputs' scale."""

from faults._base import each_backend, with_faults

SCALE = 1.02


def _layer1_mlp(model):
    return next((module for name, module in model.named_modules() if name.endswith("layers.1.mlp")), None)


class ScaledLayer1Mlp:
    def export(self, model, sample_inputs, config=None):
        target = _layer1_mlp(model)
        handle = target.register_forward_hook(lambda module, args, out: out * SCALE) if target is not None else None
        try:
            return super().export(model, sample_inputs, config)
        finally:
            if handle is not None:
                handle.remove()


with_faults(globals(), exporters=each_backend(ScaledLayer1Mlp))

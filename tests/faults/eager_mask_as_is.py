"""Fault: a static decode graph of eager attention adds the caller's bool mask to its scores as it is (the graph
takes the documented bool mask, but nothing turns it into eager attention's additive form)."""

from faults._base import each_backend, with_faults


class EagerMaskAsIs:
    def export_for_generation(self, *args, **kwargs):
        from hfexport.patching import sliding_window

        original = sliding_window.additive_where_eager
        sliding_window.additive_where_eager = lambda mask, config, dtype: mask
        try:
            return super().export_for_generation(*args, **kwargs)
        finally:
            sliding_window.additive_where_eager = original


with_faults(globals(), exporters=each_backend(EagerMaskAsIs))

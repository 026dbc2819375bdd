"""Fault: the export silences every warning "for the trace" and never restores the filters."""

import warnings

from faults._base import each_backend, with_faults


class SilencesWarnings:
    def export(self, model, sample_inputs, config=None):
        warnings.simplefilter("ignore")
        return super().export(model, sample_inputs, config)


with_faults(globals(), exporters=each_backend(SilencesWarnings))

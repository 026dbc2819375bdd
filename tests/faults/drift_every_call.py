"""Fault: version drift is warned on every environment check, not once per exporter class."""

import hfexport.base

from faults._base import each_backend, with_faults


class Repeats:
    @classmethod
    def validate_environment(cls):
        hfexport.base._DRIFT_WARNED.discard(cls)
        super().validate_environment()


with_faults(globals(), exporters=each_backend(Repeats))

"""Fault: register_exporter accepts the class but the Auto classes never see it."""

import hfexport

from faults._base import with_faults

with_faults(globals())


def register_exporter(name):
    def decorator(cls):
        if not (isinstance(cls, type) and issubclass(cls, hfexport.HfExporter)):
            raise TypeError(f"register_exporter({name!r}) needs a subclass of HfExporter, got {cls!r}")
        return cls

    return decorator

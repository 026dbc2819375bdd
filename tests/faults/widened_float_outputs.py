"""Fault: the runtime hands every floating-point output back as float64 (same values, twice the memory)."""

import hfexport.runtime

from faults._base import runtime_with, with_faults


def load(path, **options):
    runner = hfexport.runtime.load(path, **options)

    def run(inputs=None, **kwargs):
        out = runner(inputs, **kwargs)
        return {k: v.double() if v.is_floating_point() else v for k, v in out.items()}

    return run


runtime = runtime_with()
runtime.load = load
with_faults(globals(), runtime=runtime)

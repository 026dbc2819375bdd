"""Fault: the runtime returns every floating-point output off by 1e-3."""

import types

import hfexport.runtime

from faults._base import runtime_with, with_faults


def load(path, **options):
    runner = hfexport.runtime.load(path, **options)

    def run(inputs=None, **kwargs):
        out = runner(inputs, **kwargs)
        return {k: v + 1e-3 if v.is_floating_point() else v for k, v in out.items()}

    return run


runtime = runtime_with()
runtime.load = load
with_faults(globals(), runtime=runtime)

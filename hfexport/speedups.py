"""One switch for every speed-up: mechanisms that make an export, a load or a decode faster and change no result,
kept apart from the correctness workarounds so that each can be judged by turning it off.

The speed-ups: the patches registered with ``speedup=True`` (ExecuTorch's skipped retraces and its one code
regeneration per partitioning, ``hfexport/executorch/speedups/``; the memoised ``.pt2`` deserialiser,
``patching/program_load.py``), the fake-tensor cache decision (``trace_cache``: off, torch's own setting stands)
and the decode loops' fast paths (Dynamo's flat graph after one checked call per input signature and its linear
weights laid out for one-token steps, ONNX Runtime's reused IO binding). ``HFEXPORT_SPEEDUPS=0`` in the
environment, or the block ``with speedups_off():``, turns every one of them off: the results are the same, only
slower (but for the float32 ulps of the weight layout, whose sums run in another order). The ExecuTorch
exporter's single trace into the decomposed program is its pipeline, not a switchable speed-up: with the switch
off, EXIR's retraces run on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

ENV = "HFEXPORT_SPEEDUPS"
_OFF: contextvars.ContextVar[bool] = contextvars.ContextVar("hfexport_speedups_off", default=False)


def enabled() -> bool:
    """Whether speed-ups apply now: not turned off by ``HFEXPORT_SPEEDUPS=0`` (or ``off``, ``false``) nor by an
    enclosing ``speedups_off()``."""
    if _OFF.get():
        return False
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


@contextlib.contextmanager
def speedups_off() -> Iterator[None]:
    """Every speed-up off for the block (exports, loads and decode loops made inside it)."""
    token = _OFF.set(True)
    try:
        yield
    finally:
        _OFF.reset(token)

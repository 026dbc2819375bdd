"""Warm the fork server: measure one small architecture once there, so every worker forks warm.

Each architecture runs in a worker forked from the server. Without this, every worker paid the first
export's one-time costs again: lazily imported modules, the ONNX translation registry, dispatch and
fake-tensor caches, compiled regexes, first calls into ONNX Runtime: seconds on every architecture
(``python -m conformance.coverage.warm`` prints the first and the warm pair of one). The server now runs the cells of
one tiny causal LM through the implementation's adapter before it forks anything and discards the
results: they judge nothing.

The warm-up runs with one intra-op thread (as the workers do), so no thread pool exists to be broken
by the fork; a warm-up that fails or overruns is logged and the sweep goes on cold.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

# The environment the sweep sets for its fork server: which backends to warm and where to log it.
BACKENDS_VARIABLE = "COVERAGE_WARM_BACKENDS"
LOG_VARIABLE = "COVERAGE_WARM_LOG"
WARM_ARCHITECTURE = "LlamaForCausalLM"
WARM_SECONDS = 180


class _Overran(Exception):
    pass


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """File descriptors 1 and 2 to ``path`` for the duration (the server's own are the user's terminal)."""
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def warm_up(impl: str, backends: list[str], log: str) -> bool:
    """Run ``WARM_ARCHITECTURE``'s cells on ``backends``; True when they ran. Never raises."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="coverage-warm-"))

    def overran(signum: int, frame: object) -> None:
        raise _Overran(f"the warm-up ran past {WARM_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, overran)
    signal.alarm(WARM_SECONDS)
    ok = False
    with _output_to(log):
        try:
            from pytest_hfexport.adapters import resolve

            from .build import build
            from .cells import run_cell
            from .enumerate import architectures

            adapter = resolve(impl)
            (arch,) = architectures(f"^{WARM_ARCHITECTURE}$", None, "all")
            built = build(arch)
            for backend in backends:
                result = run_cell(adapter, built, backend, workdir / backend)
                print(f"warm-up {arch.name} on {backend}: {result['status']} {result.get('message', '')}", flush=True)
            ok = True
        except BaseException:  # noqa: BLE001 - the fork server must survive anything the warm-up meets
            traceback.print_exc()
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            shutil.rmtree(workdir, ignore_errors=True)
            print(
                f"warm-up {'done' if ok else 'failed'} in {time.perf_counter() - started:.1f} s; "
                f"{_threads()} threads in the fork server",
                flush=True,
            )
    return ok


def warm_from_environment(impl: str) -> None:
    """Warm up when the sweep asked for it (``COVERAGE_WARM_BACKENDS``), then freeze what the server holds so
    the workers' garbage collections never walk the preloaded heap."""
    backends = [b for b in os.environ.get(BACKENDS_VARIABLE, "").split(",") if b]
    if backends:
        warm_up(impl, backends, os.environ.get(LOG_VARIABLE, os.devnull))
    gc.collect()
    gc.freeze()


_PROBE = """
import sys, time, tempfile, torch
from pathlib import Path
import conformance.coverage.preload
from conformance.coverage.build import build
from conformance.coverage.cells import run_cell
from conformance.coverage.enumerate import architectures
from pytest_hfexport.adapters import resolve
from conformance.coverage.warm import warm_up
import os
if sys.argv[1] == "warm":
    warm_up(sys.argv[2], sys.argv[4].split(","), os.devnull)
torch.set_num_threads(1)
adapter = resolve(sys.argv[2])
(arch,) = architectures("^" + sys.argv[3] + "$", None, "all")
start = time.perf_counter()
built = build(arch)
for backend in sys.argv[4].split(","):
    run_cell(adapter, built, backend, Path(tempfile.mkdtemp()) / backend)
print(time.perf_counter() - start)
"""


def main(argv: list[str] | None = None) -> int:
    """Print one architecture's build and cells timed in a fresh process, cold and after the warm-up, as a
    ratio (what one sweep worker does, forked cold or warm)."""
    import argparse
    import subprocess
    import sys

    parser = argparse.ArgumentParser(prog="python -m conformance.coverage.warm", description=main.__doc__)
    parser.add_argument("--impl", default="hfexport")
    parser.add_argument("--arch", default="Qwen2ForCausalLM", help="the architecture timed (not the warm one)")
    parser.add_argument("--backends", default="dynamo,onnx")
    parser.add_argument("--repeat", type=int, default=3, help="processes per mode; the median is printed")
    args = parser.parse_args(argv)
    from .quiet import set_environment

    set_environment()
    seconds: dict[str, list[float]] = {"cold": [], "warm": []}
    for _ in range(args.repeat):
        for mode in seconds:
            out = subprocess.run(
                [sys.executable, "-c", _PROBE, mode, args.impl, args.arch, args.backends],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            seconds[mode].append(float(out.strip().splitlines()[-1]))
    cold, warm = (sorted(v)[len(v) // 2] for v in seconds.values())
    print(
        f"{args.impl} {args.arch} on {args.backends}, median of {args.repeat} fresh processes: "
        f"cold {cold:.1f} s, after the warm-up on {WARM_ARCHITECTURE} {warm:.1f} s ({warm / cold:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""torch's threads in each pytest-xdist worker: the machine's cores shared among the workers, not each taking all.

torch sizes its intra-op thread pool to the machine's cores in every process. Under ``pytest -n N`` that is N
pools of all the cores at once, and their threads spin while waiting for work, so each worker's eager and
exported runs slow the others down (``docs/performance.md``, "Threads per test worker").

``--hfexport-worker-threads``: ``auto`` (default) gives each xdist worker ``cores // workers`` threads (at least
one) and leaves a run without xdist alone; a number sets torch's threads to that in every process that runs
tests; ``keep`` leaves torch's own choice. Only the thread count changes: eager and exported programs run in the
same process with the same setting, so a check compares like with like. The plugin's own ONNX Runtime sessions
(``ort_session_options``) take as many intra-op threads as torch has: ONNX Runtime's default is also a thread
per core, spinning while it waits.
"""

from __future__ import annotations

import os

import pytest

AUTO, KEEP = "auto", "keep"


def parse(value: str | None) -> str | int:
    """The option's value as ``AUTO``, ``KEEP`` or a positive thread count; anything else is a usage error."""
    text = (value or AUTO).strip().lower()
    if text in (AUTO, KEEP):
        return text
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise pytest.UsageError(
            f"--hfexport-worker-threads={value}: use auto (cores shared among xdist workers), keep (torch's own "
            "choice) or a positive number of threads"
        )
    return threads


def threads_for(setting: str | int, workers: int | None, cores: int) -> int | None:
    """torch threads for one process: ``workers`` is the xdist worker count (None outside xdist); None: leave
    torch's setting alone."""
    if setting == KEEP:
        return None
    if setting == AUTO:
        return max(1, cores // workers) if workers else None
    return int(setting)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform says, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def apply(config: pytest.Config, setting: str | int) -> int | None:
    """Set torch's thread count for this process as the setting says; returns the count set (None: unchanged)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and getattr(config.option, "numprocesses", None):
        return None  # the controller of an xdist run: it runs no tests
    workers = int(workerinput["workercount"]) if workerinput and "workercount" in workerinput else None
    threads = threads_for(setting, workers, usable_cores())
    if threads is None:
        return None
    import torch

    torch.set_num_threads(threads)
    return threads


def ort_session_options() -> object:
    """Options for the plugin's own ONNX Runtime sessions: ONNX Runtime's defaults, its intra-op pool the size of
    torch's (which ``apply`` sized for this process)."""
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return options

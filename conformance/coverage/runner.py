"""Run cells in worker processes, at most ``jobs`` at a time, each cell under its own timeout.

One task is one architecture and the backends still to measure for it: the worker builds the model
once and measures its backends in turn (``worker``). A worker that runs past ``timeout`` seconds on
one cell is killed and that cell recorded as failed at stage ``timeout``; one that dies (a native
runtime's segfault, an abort) has the cell it was running recorded at stage ``crash``. Either way the
backends it had not reached go back to the queue in a fresh worker, so a bad cell costs one cell.

Workers fork from a server that imported torch, transformers, the ONNX stack and the implementation
once (``preload``) and ran one small architecture's cells (``warm``), so each starts in milliseconds and
warm rather than paying the imports and the first export's one-time costs again.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .enumerate import Architecture
from .quiet import set_environment

Record = dict[str, Any]
POLL_SECONDS = 0.2


@dataclass
class Task:
    arch: Architecture
    backends: list[str]
    attempt: int = 0


@dataclass
class Running:
    task: Task
    process: Any
    events: Path
    log: Path
    offset: int = 0
    current: str | None = "build"  # "build" (worker start-up included) or the backend being measured
    since: float = field(default_factory=time.monotonic)
    remaining: list[str] = field(default_factory=list)
    build: dict[str, Any] = field(default_factory=dict)


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def _last_log_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


class Sweep:
    """Measure tasks in worker processes; ``on_record(arch, backend, record)`` receives every cell."""

    def __init__(
        self,
        impl: str,
        on_record: Callable[[Architecture, str, Record], None],
        *,
        jobs: int = 2,
        timeout: float = 120.0,
        generation: bool = True,
        logs: Path | None = None,
        target: Callable[..., None] | None = None,
        start_method: str = "forkserver",
        warm_backends: list[str] | None = None,
    ) -> None:
        from .warm import BACKENDS_VARIABLE, LOG_VARIABLE
        from .worker import run_task

        self.impl = impl
        self.on_record = on_record
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.generation = generation
        self.target = target or run_task
        self.tmp = Path(tempfile.mkdtemp(prefix="coverage-"))
        self.logs = logs or self.tmp / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        set_environment()
        os.environ["COVERAGE_IMPL"] = impl
        os.environ[BACKENDS_VARIABLE] = ",".join(warm_backends or [])  # the fork server's warm-up (``warm``)
        os.environ[LOG_VARIABLE] = str(self.logs / "warm-up.log")
        self.context: Any = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self.context.set_forkserver_preload(["conformance.coverage.preload"])
        self._count = 0

    # -- one worker --------------------------------------------------------------------------------
    def _start(self, task: Task) -> Running:
        self._count += 1
        self.tmp.mkdir(parents=True, exist_ok=True)
        events = self.tmp / f"{self._count}-{task.arch.name}.jsonl"
        log = self.logs / f"{task.arch.name}.log"
        payload = {
            "impl": self.impl,
            "arch": task.arch.to_dict(),
            "backends": list(task.backends),
            "generation": self.generation,
            "tmpdir": str(self.tmp),
        }
        events.touch()
        process = self.context.Process(target=self.target, args=(payload, str(events), str(log)), daemon=True)
        process.start()
        return Running(task, process, events, log, remaining=list(task.backends))

    def _emit(self, run: Running, backend: str, record: Record) -> None:
        record.setdefault("build", run.build)
        self.on_record(run.task.arch, backend, record)
        if backend in run.remaining:
            run.remaining.remove(backend)

    def _read(self, run: Running) -> None:
        with open(run.events, encoding="utf-8") as handle:
            handle.seek(run.offset)
            while True:
                line = handle.readline()
                if not line.endswith("\n"):
                    break  # a line still being written: read it next time
                run.offset = handle.tell()
                self._event(run, json.loads(line))

    def _event(self, run: Running, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "build_start":
            run.current, run.since = "build", time.monotonic()
        elif kind == "built":
            run.build = {**event["info"], "seconds": round(event["seconds"], 3)}
        elif kind == "not_buildable":
            reason = {"stage": event["stage"], "message": event["reason"], "seconds": round(event["seconds"], 3)}
            for backend in list(run.remaining):
                self._emit(run, backend, {"status": "not_buildable", **reason, "checks": {}})
            run.current = None
        elif kind == "start":
            run.current, run.since = event["backend"], time.monotonic()
        elif kind == "cell":
            record = {**event["result"], "seconds": round(event["seconds"], 3)}
            self._emit(run, event["backend"], record)
            run.current = None

    def _lost(self, run: Running, stage: str, message: str, queue: deque[Task]) -> None:
        """The worker is gone (killed or died): record what it was doing, requeue what it had not reached."""
        elapsed = round(time.monotonic() - run.since, 3)
        if run.current == "build":
            for backend in list(run.remaining):
                self._emit(
                    run,
                    backend,
                    {"status": "not_buildable", "stage": stage, "message": message, "seconds": elapsed, "checks": {}},
                )
            return
        if run.current is not None and run.current in run.remaining:
            self._emit(
                run,
                run.current,
                {"status": "fail", "stage": stage, "message": message, "seconds": elapsed, "checks": {}},
            )
        if run.remaining:
            queue.append(Task(run.task.arch, list(run.remaining), run.task.attempt + 1))

    # -- the pool ----------------------------------------------------------------------------------
    def run(self, tasks: list[Task], deadline: float | None = None) -> int:
        """Measure ``tasks``; no task starts after ``deadline`` (``time.monotonic()``), those are left for a
        later, resumed sweep. Returns how many tasks were left."""
        queue: deque[Task] = deque(tasks)
        running: list[Running] = []
        left = 0
        try:
            while queue or running:
                if deadline is not None and time.monotonic() > deadline:
                    kept = deque(t for t in queue if t.attempt > 0)  # requeued cells of started tasks still run
                    left += len(queue) - len(kept)
                    queue = kept
                while queue and len(running) < self.jobs:
                    running.append(self._start(queue.popleft()))
                time.sleep(POLL_SECONDS)
                for run in list(running):
                    self._read(run)
                    if not run.process.is_alive():
                        run.process.join()
                        self._read(run)
                        if run.remaining:
                            detail = _last_log_line(run.log)
                            message = f"worker died ({_signal_name(run.process.exitcode)})" + (
                                f"; last output: {detail}" if detail else ""
                            )
                            self._lost(run, "crash", message, queue)
                        running.remove(run)
                    elif run.current is not None and time.monotonic() - run.since > self.timeout:
                        run.process.kill()
                        run.process.join()
                        self._read(run)
                        self._lost(run, "timeout", f"no result within {self.timeout:g} s", queue)
                        running.remove(run)
        finally:
            for run in running:
                run.process.kill()
                run.process.join()
            if not self.logs.is_relative_to(self.tmp):  # event files and killed workers' artifacts
                shutil.rmtree(self.tmp, ignore_errors=True)
        return left

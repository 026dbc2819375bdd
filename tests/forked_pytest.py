"""Conformance runs in a fresh process each, without paying torch's and transformers' imports each time.

The seeded-fault tests run ``pytest conformance`` once per fault (about 45 runs). Each fresh interpreter spent
about 5 of its 8 seconds importing torch, transformers' model modules, onnxruntime and torchao before collecting
one test. Here one process per test worker imports those once (the zoo's imports, then it forgets every module
pytest would rewrite: this repository's and the pytest plugins'), and forks a child per run. The child is a new
process with its own pytest session, working directory, environment and ``sys.path``; it imports this
repository's packages itself, so pytest rewrites and registers them as in a plain run. Its output goes to a
file; its exit code comes back.

What a fork cannot reproduce is what a third-party import prints: that went to this process's stderr once.
A test that judges the terminal (the hfexport smoke's no-warnings check) runs a real subprocess instead.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This repository's top-level packages: imported by each child, never kept from the preload.
OURS = ("conformance", "hfexport", "pytest_hfexport", "faults", "hfexport_launcher")

_SERVER = r"""
import json, os, signal, sys, time, traceback
import conformance.zoo                       # torch, transformers' zoo modules, torchao through the judge
import onnxruntime, onnxscript, torch.onnx  # the ONNX backend's imports
import executorch.exir                       # the ExecuTorch backend's
from importlib.metadata import entry_points
# pytest rewrites the asserts of every plugin distribution's modules as it imports them, and warns about one
# imported before: forget those too (hypothesis and anyio come in with the zoo).
rewritten = set(OURS)
for plugin in entry_points(group="pytest11"):
    files = plugin.dist.files or ()
    rewritten.update(f.parts[0].removesuffix(".py") for f in files if len(f.parts) > 1 or f.suffix == ".py")
for name in [m for m in sys.modules if m.split(".")[0] in rewritten]:
    del sys.modules[name]
base_path = list(sys.path)
reply = sys.stdout
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.path[:] = [request["cwd"], *request["path"], *base_path]
            sys.argv = ["pytest", *request["args"]]
            import pytest
            code = int(pytest.main(request["args"]))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = "timeout"
            break
        time.sleep(0.05)
    reply.write(json.dumps({"code": code}) + "\n"); reply.flush()
"""


class ForkedPytest:
    """One preloaded server process; ``run`` forks a child pytest from it (one run at a time)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("PYTEST_XDIST_WORKER", None)
        self._process = subprocess.Popen(
            [sys.executable, "-c", f"OURS = {OURS!r}\n{_SERVER}"], cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self._lock = threading.Lock()
        if self._process.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise RuntimeError(f"the preloaded pytest server did not start (exit {self._process.wait()})")

    def run(self, args: list[str], env: dict[str, str], path: list[str], output: Path,
            timeout: float) -> tuple[int, str]:
        """(exit code, output) of ``pytest ARGS`` run in ROOT with ``env`` and ``path`` before sys.path."""
        request = {"args": args, "env": env, "path": path, "cwd": str(ROOT), "output": str(output),
                   "timeout": timeout}
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            self._process.stdin.flush()  # type: ignore[union-attr]
            line = self._process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the preloaded pytest server died (exit {self._process.wait()})")
        code = json.loads(line)["code"]
        text = output.read_text() if output.exists() else ""
        if code == "timeout":
            raise subprocess.TimeoutExpired(["pytest", *args], timeout, output=text)
        return code, text

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()  # type: ignore[union-attr]
            self._process.wait(timeout=30)


_server: ForkedPytest | None = None


def forked_pytest() -> ForkedPytest:
    """This process's server, started on first use and closed at exit."""
    global _server
    if _server is None:
        _server = ForkedPytest()
        atexit.register(_server.close)
    return _server

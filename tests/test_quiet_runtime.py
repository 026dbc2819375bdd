"""Loading an ExecuTorch program prints nothing from native code but what matters.

The XNNPACK thread pool probes the CPU on its first use in a process and prints five lines per machine
without ARM CPU-id files; ``hfexport run`` and every decode loop would show them to the user. The runner
drops exactly those lines and passes every other native message through.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("executorch")

SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    from hfexport import ExecutorchConfig, ExecutorchExporter
    from hfexport.executorch import runtime as et

    if "--no-filter" in sys.argv:
        import contextlib
        et._native_probe_lines_dropped = contextlib.nullcontext
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()
    program = ExecutorchExporter().export(model, {"input": torch.randn(2, 4)}, ExecutorchConfig())
    path = sys.argv[1]
    ExecutorchExporter.save(program, path)
    print("--- load", file=sys.stderr, flush=True)
    runner = et.ExecutorchRunner(path)
    os.write(2, b"a native message that is not probe chatter\\n")  # passes through untouched
    print(runner({"input": torch.randn(2, 4)})["output_0"].shape if "output_0" in runner.output_names else "ran")
    """
)


def _stderr_after_load(tmp_path, *flags: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "m.pte"), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr.split("--- load", 1)[1]


def test_loading_a_program_prints_no_cpu_probe_lines(tmp_path):
    after = _stderr_after_load(tmp_path)
    assert "cpuinfo_utils" not in after, after
    assert "a native message that is not probe chatter" in after


def test_the_probe_lines_are_really_printed_without_the_filter(tmp_path):
    """The check above could not fail on a machine where the probe is silent; here it is not."""
    after = _stderr_after_load(tmp_path, "--no-filter")
    assert "[cpuinfo_utils.cpp:" in after, after

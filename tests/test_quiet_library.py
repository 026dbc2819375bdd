"""A library user's script shows no third-party noise that hfexport's own exports cause, and keeps its own logging
levels and warning filters (hfexport.quiet)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("executorch")
pytest.importorskip("onnxscript")

SCRIPT = textwrap.dedent(
    """
    import logging, sys, warnings
    import torch
    from hfexport import ExecutorchConfig, ExecutorchExporter, OnnxConfig, OnnxExporter, quiet

    if "--loud" in sys.argv:  # the fault: nothing listed, so nothing silenced
        quiet.NOISY_LOGGERS.clear()
        quiet.NOISY_WARNINGS = ()
    logging.getLogger("torchao").setLevel(logging.INFO)
    filters = list(warnings.filters)

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    OnnxExporter().export(Twice(), {"x": torch.ones(2, 3)}, config=OnnxConfig())
    ExecutorchExporter().export(Twice(), {"x": torch.ones(2, 3)}, config=ExecutorchConfig())
    assert logging.getLogger("torchao").level == logging.INFO, "the user's logging level changed"
    assert warnings.filters == filters, "the user's warning filters changed"
    print("done")
    """
)
NOISE = ("Failed to load", "is an Enum subclass", "torchvision is not installed", "LeafSpec")


def run(*args: str) -> str:
    # As a user runs it: without the variable the repository's conftest sets to keep torchao's probe quiet.
    env = {k: v for k, v in os.environ.items() if k != "TORCHAO_FORCE_SKIP_LOADING_SO_FILES"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_an_export_script_prints_only_its_own_output():
    out = run()
    assert out.strip() == "done", out[-3000:]


def test_without_the_list_the_noise_shows():
    out = run("--loud")
    assert [n for n in NOISE if n in out] == list(NOISE), out[-3000:]

"""`make compat` and its CI matrix example: the stacks of the window, their environments, the page, and the
workflow's own steps run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conformance import compat

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "compat.yml"


def test_every_stack_of_the_window_is_a_job_of_the_ci_matrix():
    stacks = list(compat.read_window()["stacks"])
    matrix = re.search(r"stack: \[(.*)\]", WORKFLOW.read_text()).group(1).split(", ")
    assert ["pinned", *matrix] == stacks


def test_a_stack_is_the_pinned_stack_with_its_releases_in_place():
    pinned = compat.read_constraints()
    moved = compat.stack_pins("transformers-5.25")
    assert moved["transformers"] == "5.25.0"
    assert {k: v for k, v in moved.items() if k != "transformers"} == {
        k: v for k, v in pinned.items() if k != "transformers"
    }
    with pytest.raises(SystemExit, match="no stack 'nope'"):
        compat.stack_pins("nope")


def test_page_lists_every_stack_with_counts_wall_time_and_causes():
    window = compat.read_window()
    result = {
        "stack": "transformers-5.25",
        "summary": {"pass": 10, "fail": 2, "error": 0, "xpass": 0, "xfail": 1, "unsupported": 3, "skip": 0},
        "wall_s": 905.2,
        "counts": ["| check | dynamo |", "|---|---|", "| all | 10/2/1/3 |"],
        "gate": {"regressions": 2, "causes": [{"rows": 2, "cause": "Guard failed: N", "backends": ["dynamo"],
                                                "example": "llama/dynamo/static_cache"}]},
    }
    text = compat.page({"transformers-5.25": result}, window)
    assert "| transformers-5.25 | transformers 5.25.0 | 10 / 2 / 1 / 3 | 2 | 15 min 5 s |" in text
    assert "| torch-2.14 | torch 2.14.1 | not measured | | |" in text
    assert "- 2 x `Guard failed: N` (dynamo; e.g. llama/dynamo/static_cache)" in text


def run_lines() -> list[str]:
    return [line.strip().removeprefix("- ").removeprefix("run: ") for line in WORKFLOW.read_text().splitlines()
            if line.strip().startswith("- run: ")]


@pytest.mark.hfexport_slow
def test_the_ci_matrix_steps_run_as_written(tmp_path):
    """Each job's `run:` line, in job order, with the first matrix stack and a narrowed tier (COMPAT_ARGS): the
    pinned job writes the baseline, the stack job builds its environment (kept in .venvs/) and gates against it,
    the page job folds both summaries into the page."""
    pinned, stack, page = run_lines()
    env = {**os.environ, "HFEXPORT_COMPAT_DOCS": str(tmp_path / "docs"), "HFEXPORT_COMPAT_OUT": str(tmp_path / "out"),
           "COMPAT_ARGS": "-k test_config_round_trip"}
    env.pop("PYTEST_XDIST_WORKER", None)
    first = re.search(r"stack: \[([^,\]]+)", WORKFLOW.read_text()).group(1)
    for line in (pinned, stack.replace("${{ matrix.stack }}", first), page):
        done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
        assert done.returncode == 0, (line, done.stdout[-3000:], done.stderr[-3000:])
    results = json.loads((tmp_path / "docs" / "reports" / "compatibility.json").read_text())
    assert set(results) == {"pinned", first}
    assert results[first]["gate"]["regressions"] == 0 and results[first]["summary"]["pass"] > 0
    assert f"| {first} |" in (tmp_path / "docs" / "compatibility.md").read_text()
    assert shlex.split(pinned)[0] == "make"


@pytest.mark.hfexport_slow
def test_a_real_bump_between_two_installed_stacks_is_gated(tmp_path):
    """The downstream example on the pinned stack, then in the transformers-5.25 stack's own environment (built by
    `make compat`, kept in .venvs/) gated against the first report: a real upgrade, not a simulated regression.
    The two reports carry the two transformers releases, and the gate passes because every row still passes."""
    new = compat.ensure_venv("transformers-5.25", ROOT / ".venvs")
    args = ["-m", "pytest", "examples/downstream", "-p", "no:cacheprovider", "--hfexport-backend=dynamo,onnx"]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    done = subprocess.run([compat.sys.executable, *args, f"--hfexport-report={before}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:]
    done = subprocess.run([str(new), *args, f"--hfexport-report={after}", f"--hfexport-baseline={before}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 regression(s) from 0 cause(s)" in done.stdout
    versions = [json.loads(p.read_text())["versions"]["transformers"] for p in (before, after)]
    assert versions == [compat.read_constraints()["transformers"], "5.25.0"]


@pytest.mark.hfexport_slow
@pytest.mark.parametrize("stack", ["transformers-5.25", "torch-2.14"])
def test_installing_into_a_stack_of_the_window_moves_nothing(stack):
    """pip, asked to install hfexport with every extra into an environment of the window, would install hfexport
    and nothing else: no torch, transformers, ONNX or ExecuTorch release is replaced."""
    python = compat.ensure_venv(stack, ROOT / ".venvs")
    done = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "-e", ".[all,test]"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    would = [line for line in done.stdout.splitlines() if line.startswith("Would install")]
    assert would == ["Would install hfexport-0.1.0"], done.stdout[-3000:]

"""The recipes of docs/plugin.md, executed: exportability in a model repo, a version-bump gate, and the CI
workflow example's own commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "hfexport.yml"


def pytest_lines() -> list[list[str]]:
    """Every `run: pytest ...` command of the CI workflow example, as argument lists."""
    out = []
    for line in WORKFLOW.read_text().splitlines():
        command = line.strip().removeprefix("- ").strip()
        if command.startswith("run: pytest "):
            out.append(shlex.split(command.removeprefix("run: ")))
    return out


def run(args: list[str], cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_ci_workflow_asserts_exportability_and_gates_a_bump(tmp_path):
    """Run the workflow's two pytest steps in order: both green on an unchanged stack, the second gated by the
    first's report; then the gate run again against an implementation that regressed (a seeded fault stands
    for a broken new version) fails and lists the regressed rows."""
    first, gate = pytest_lines()
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    os.symlink(ROOT / "examples" / "downstream", repo / "examples" / "downstream")
    done = run(first, repo)
    assert done.returncode == 0, done.stdout[-3000:]
    rows = json.loads((repo / "out" / "exportability.json").read_text())["rows"]
    assert rows and {r["status"] for r in rows} == {"pass"}
    done = run(gate, repo)
    assert done.returncode == 0 and "0 regression(s)" in done.stdout, done.stdout[-3000:]
    regressed = run([*gate, "--hfexport-impl=faults.perturbed_outputs"], repo, extra_path=str(ROOT / "tests"))
    assert regressed.returncode == 1, regressed.stdout[-3000:]
    assert "REGRESSION tiny-classifier/dynamo/export: pass -> fail" in regressed.stdout, regressed.stdout[-3000:]

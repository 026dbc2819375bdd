"""The recipes of docs/plugin.md, executed: exportability in a model repo, a version-bump gate, and the CI
workflow example's own commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


# The workflow's steps run as written in the slow tier (the downstream example's generative models take about
# three minutes per step on two cores); the default run selects its classifier.
WORKFLOW_RUNS = {
    "classifier": (["-k", "classifier"], "faults.perturbed_outputs", "REGRESSION tiny-classifier/dynamo/export: pass -> fail"),
    "as-written": ([], "faults.scaled_layer1_mlp", "REGRESSION tiny-gpt-neox/dynamo/generation: pass -> fail"),
}


@pytest.mark.parametrize(
    "run_as", [pytest.param("classifier"), pytest.param("as-written", marks=pytest.mark.hfexport_slow)]
)
def test_the_ci_workflow_asserts_exportability_and_gates_a_bump(run_as, tmp_path):
    """Run the workflow's two pytest steps in order: both green on an unchanged stack, the second gated by the
    first's report; then the gate run again against an implementation that regressed (a seeded fault stands
    for a broken new version) fails and lists the regressed rows: as written, a generation row of the example's
    causal LM (a bump that breaks generation fails the repo's gate)."""
    selection, fault, expected = WORKFLOW_RUNS[run_as]
    first, gate = ([*line, *selection] for line in pytest_lines())
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    os.symlink(ROOT / "examples" / "downstream", repo / "examples" / "downstream")
    done = run(first, repo)
    assert done.returncode == 0, done.stdout[-3000:]
    rows = json.loads((repo / "out" / "exportability.json").read_text())["rows"]
    assert rows and {r["status"] for r in rows} == {"pass"}
    if run_as == "as-written":
        assert {"generation", "generation_tokens", "multi_token_decode", "static_cache"} <= {r["check"] for r in rows}
    done = run(gate, repo)
    assert done.returncode == 0 and "0 regression(s)" in done.stdout, done.stdout[-3000:]
    regressed = run([*gate, f"--hfexport-impl={fault}"], repo, extra_path=str(ROOT / "tests"))
    assert regressed.returncode == 1, regressed.stdout[-3000:]
    assert expected in regressed.stdout, regressed.stdout[-3000:]


DOWNSTREAM_LLAMA = '''
import torch, transformers
from pytest_hfexport import ModelCase, parametrize_with_checks


def build():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).eval()


def make_inputs(model, batch, seq):
    ids = torch.randint(0, 64, (batch, seq))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@parametrize_with_checks([ModelCase("tiny-llama", build, make_inputs)], checks=["export"])
def test_tiny_llama(check):
    check()
'''


def test_a_model_repo_failure_names_the_first_diverging_module(tmp_path):
    """A model repo's ``parametrize_with_checks`` run on an export whose layer-1 MLP is 2% off: the failure message
    and the report row name ``model.layers.1.mlp`` (the plugin's export_and_compare locates every mismatch)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_llama.py").write_text(DOWNSTREAM_LLAMA)
    done = run(["pytest", "-p", "no:cacheprovider", "test_llama.py", "--hfexport-backend=onnx",
                "--hfexport-impl=faults.scaled_layer1_mlp", "--hfexport-report=report.json"], repo,
               extra_path=str(ROOT / "tests"))
    assert done.returncode == 1, done.stdout[-3000:]
    assert "first diverging module: model.layers.1.mlp (LlamaMLP)" in done.stdout, done.stdout[-3000:]
    rows = json.loads((repo / "report.json").read_text())["rows"]
    assert [r["first_divergence"] for r in rows] == ["model.layers.1.mlp"], rows

"""A model repo gets every check family of the suite, and its gate sees a generation-only fault.

A repo folder outside the project's packages (``tests/model_repo/repo_models.py`` copied into a temporary
folder as ``test_repo.py``) holds a causal LM, an encoder-decoder and a plain module, tested with
``parametrize_with_checks`` and its default checks on the three backends. Then the same repo, run against an
implementation whose generation components are wrong while plain exports are right
(``faults.maskless_static_decode``: the decode graph traced without its attention mask) and gated by the first
run's report, must fail the gate and name the generation rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_repo(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "test_repo.py",
        "--hfexport-backend=all",
        *args,
    ]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=3000)


@pytest.mark.hfexport_slow
def test_a_model_repo_gates_a_generation_only_fault(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "tests" / "model_repo" / "repo_models.py", repo / "test_repo.py")
    first = run_repo(repo, "--hfexport-report=before.json")
    assert first.returncode == 0, first.stdout[-4000:]
    rows = json.loads((repo / "before.json").read_text())["rows"]
    checks = {(r["model"], r["check"]) for r in rows}
    assert {
        ("tiny-llama", c) for c in ("generation", "generation_tokens", "multi_token_decode", "static_cache")
    } <= checks
    assert {("tiny-t5", c) for c in ("generation", "generation_tokens")} <= checks
    assert not {c for m, c in checks if m == "scorer"} & {"generation", "static_cache"}, checks
    gated = run_repo(
        repo,
        "--hfexport-baseline=before.json",
        "--hfexport-report=after.json",
        "--hfexport-impl=faults.maskless_static_decode",
    )
    assert gated.returncode == 1, gated.stdout[-4000:]
    regressed = [line for line in gated.stdout.splitlines() if line.startswith("REGRESSION ")]
    assert regressed and all(
        "/generation" in line or "/static_cache" in line or "/multi_token_decode" in line for line in regressed
    ), regressed
    assert any("tiny-llama/" in line and "/static_cache" in line for line in regressed), regressed
    assert not any("/export:" in line or "/shapes:" in line for line in regressed), regressed


def test_every_failing_check_of_a_model_repo_names_the_diverging_module(tmp_path):
    """faults.scaled_layer1_mlp (llama's layer-1 MLP 2% too large inside every exported graph) in a model repo, on
    Dynamo (the locator per backend is tests/test_localise.py's): each check that compares values fails and its
    report row names the perturbed module, the generation components, the multi-token decode and the static-cache
    loop included."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "tests" / "model_repo" / "repo_models.py", repo / "test_repo.py")
    done = run_repo(
        repo, "-k", "llama", "--hfexport-backend=dynamo", "--hfexport-impl=faults.scaled_layer1_mlp",
        "--hfexport-report=r.json",
    )
    rows = json.loads((repo / "r.json").read_text())["rows"]
    failed = {(r["backend"], r["check"]): r["first_divergence"] for r in rows if r["status"] == "fail"}
    assert done.returncode == 1 and {c for _, c in failed} >= {
        "export", "generation", "multi_token_decode", "static_cache"
    }, (failed, done.stdout[-3000:])
    assert set(failed.values()) == {"model.layers.1.mlp"}, failed


ZOO_REPO = '''
from conformance.zoo import get
from pytest_hfexport import parametrize_with_checks


@parametrize_with_checks([get("llama"), get("bert")])
def test_zoo(check):
    check()
'''


def test_a_zoo_entry_is_a_model_case_judged_by_the_checks_of_its_suite_families(tmp_path):
    """The suite's entries are ModelCases: a repo hands them to parametrize_with_checks and gets the plugin's checks
    of the families each entry opts into (llama: every generation family; bert: the plain ones). A
    generation-only fault (the decode graph traced without its mask) fails llama's static-cache check there."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_repo.py").write_text(ZOO_REPO)
    listed = run_repo(repo, "--hfexport-backend=dynamo", "--collect-only", "-q")
    ids = {line.split("[", 1)[1].rstrip("]") for line in listed.stdout.splitlines() if "::test_zoo[" in line}
    generation = {"generation", "generation_tokens", "multi_token_decode", "static_cache"}
    plain = {"export", "unchanged", "shapes"}
    assert ids == {f"dynamo-llama-{c}" for c in plain | generation} | {f"dynamo-bert-{c}" for c in plain}, ids
    faulty = run_repo(repo, "-k", "llama and static_cache", "--hfexport-backend=dynamo",
                      "--hfexport-impl=faults.maskless_static_decode")
    assert faulty.returncode == 1 and "1 failed" in faulty.stdout, faulty.stdout[-3000:]
    right = run_repo(repo, "-k", "llama and static_cache", "--hfexport-backend=dynamo")
    assert right.returncode == 0 and "1 passed" in right.stdout, right.stdout[-3000:]

"""The conformance suite tests itself: every seeded-fault implementation in tests/faults must make it fail,
on the check its fault belongs to, and hfexport must pass the same selection.

Each run is a real ``pytest conformance`` in a subprocess with ``--hfexport-impl=faults.<name>`` and a JSON
report; the selection keeps it to the tiny llama and the tests that judge the fault's family. The hfexport
runs over the union of the selections are also the smoke of the suite in the README's test command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from forked_pytest import forked_pytest

ROOT = Path(__file__).resolve().parents[1]

# What a warning line looks like in the terminal: Python warnings, torch's W-prefixed log lines, native loaders.
NOISE = re.compile(r"[Ww]arning|^W\d{4} |Failed to load|Skipping import of cpp")
EXPORT = "test_export.py and llama"
HYGIENE = "test_export_leaves and llama"
# Every tier but the real-size one: a selection by architecture ("qwen3") also matches its real-size entry
# (qwen3_0_6b), whose static prefill alone took two minutes of each run.
REALSIZE_LEFT_OUT = "not hfexport_realsize"
# fault module -> (backend, -k selection, checks one of which must fail)
FAULTS: dict[str, tuple[str, str, set[str]]] = {
    "static_export": ("dynamo", EXPORT, {"export", "export_batch"}),
    "perturbed_outputs": ("dynamo", EXPORT, {"export"}),
    "widened_float_outputs": ("dynamo", EXPORT, {"export"}),
    "eager_fallback_runner": ("onnx", EXPORT, {"export", "export_batch"}),
    "runner_clobbers_inputs": ("dynamo", EXPORT, {"export", "export_batch"}),
    "not_implemented_backend": ("onnx", EXPORT, {"export"}),
    "static_prefill": ("dynamo", "test_components_match and llama", {"generation"}),
    "serve_partly_eager": ("dynamo", "test_served_components_generate_eager_tokens and llama", {"generation_tokens"}),
    "fixed_query_decode": ("dynamo", "test_one_decode_graph and llama", {"multi_token_decode"}),
    "maskless_static_decode": ("dynamo", "test_guide_loop_matches and llama", {"static_cache"}),
    "maskless_static_prefill": ("dynamo", "test_static_prefill and qwen3", {"static_prefill"}),
    "eager_mask_as_is": ("dynamo", "test_guide_loop_matches and sweep_gemma2", {"static_cache"}),
    "shifted_cache_slots": ("onnx", "test_guide_loop_matches and llama", {"static_cache"}),
    "copying_loop": ("onnx", "test_implementation_loop and llama", {"static_cache_in_place"}),
    "hook_left_behind": ("dynamo", HYGIENE, {"hygiene"}),
    "grad_mode_left_off": ("dynamo", HYGIENE, {"hygiene"}),
    "inputs_mutated": ("dynamo", HYGIENE, {"hygiene"}),
    "inputs_key_added": ("dynamo", HYGIENE, {"hygiene"}),
    "warnings_silenced": ("dynamo", HYGIENE, {"hygiene"}),
    "rng_reseeded": ("dynamo", HYGIENE, {"hygiene"}),
    "frozen_parameters": ("dynamo", HYGIENE, {"hygiene"}),
    "backend_flag_left_off": ("dynamo", HYGIENE, {"hygiene"}),
    "report_in_working_directory": ("dynamo", HYGIENE, {"hygiene"}),
    "patch_kept_after_failed_lowering": ("onnx", "test_failed_lowering", {"hygiene"}),
    "partial_save": ("dynamo", "test_failed_export_leaves and save", {"hygiene"}),
    "lossy_config": ("dynamo", "test_config_round_trips", {"api"}),
    "config_ignores_unknown_fields": ("dynamo", "test_config_refuses", {"api"}),
    "accepts_foreign_config": ("dynamo", "test_exporter_refuses", {"api"}),
    "silent_drift": ("dynamo", "test_version_drift", {"api"}),
    "drift_every_call": ("dynamo", "test_version_drift", {"api"}),
    "missing_package_without_hint": ("dynamo", "test_missing_package", {"api"}),
    "registration_ignored": ("dynamo", "test_registered_backend", {"api"}),
    "ignores_dim_ranges": ("dynamo", "test_explicit_dim_ranges and llama", {"shapes"}),
    "unchecked_dim_range": ("dynamo", "test_explicit_dim_ranges and llama", {"shapes"}),
    "quant_wrong_group_size": ("executorch", "test_8da4w and llama", {"quantization_8da4w"}),
    "quant_activations_left_float": ("executorch", "test_8da8w and llama", {"quantization_8da8w"}),
    "quant_per_tensor_scale": ("dynamo", "test_int8 and llama", {"quantization_int8"}),
    "quant_layer_left_float": ("dynamo", "test_int8 and llama", {"quantization_int8"}),
    "quant_embedding_left_float": ("onnx", "test_int4 and llama", {"quantization_int4"}),
}


def run_suite(impl: str, backend: str, selection: str, report: Path,
              fresh: bool = False) -> tuple[int, list[dict], str]:
    """``pytest conformance`` on one implementation: forked from the preloaded server (``forked_pytest``), or in a
    fresh interpreter where the test judges what the terminal shows (a fork does not repeat import-time output)."""
    path = [str(ROOT / "tests"), str(ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    args = ["conformance", "-q", "-p", "no:cacheprovider", "-m", REALSIZE_LEFT_OUT,
            "-k", selection, f"--hfexport-impl={impl}", f"--hfexport-backend={backend}",
            f"--hfexport-report={report}"]
    if fresh:
        done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)
        code, output = done.returncode, done.stdout + done.stderr
    else:
        code, output = forked_pytest().run(args, env, path, report.with_suffix(".out"), timeout=900)
    rows = json.loads(report.read_text())["rows"] if report.exists() else []
    return code, rows, output


# The decode loops (the guide's and the implementation's) localise too: the same layer fault, in the static decode
# graph, is named on the loop's first differing call. ExecuTorch re-exports the components to locate (slow tier).
@pytest.mark.parametrize(
    "backend", ["dynamo", "onnx", pytest.param("executorch", marks=pytest.mark.hfexport_slow)]
)
def test_a_decode_loop_mismatch_names_the_module(backend, tmp_path):
    selection = "(test_guide_loop_matches_eager_generate or test_implementation_loop_updates_the_cache_in_place) and llama"
    code, rows, output = run_suite("faults.scaled_layer1_mlp", backend, selection, tmp_path / "report.json")
    assert code == 1 and [r["status"] for r in rows] == ["fail", "fail"], (rows, output[-3000:])
    assert [r["first_divergence"] for r in rows] == ["model.layers.1.mlp"] * 2, (rows, output[-3000:])
    assert "DecodeMismatch" in output and "first diverging module: model.layers.1.mlp (LlamaMLP)" in output


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_suite_fails_a_seeded_fault(fault, tmp_path):
    backend, selection, checks = FAULTS[fault]
    code, rows, output = run_suite(f"faults.{fault}", backend, selection, tmp_path / "report.json")
    assert rows, f"the suite ran nothing for faults.{fault}:\n{output}"
    caught = [r for r in rows if r["check"] in checks and r["status"] in ("fail", "error")]
    assert code == 1 and caught, (f"faults.{fault} was not caught by the {sorted(checks)} check(s); rows: "
                                  f"{[(r['model'], r['check'], r['status']) for r in rows]}\n{output[-4000:]}")
    assert not [r for r in rows if r["status"] == "unsupported"], "a fault's exception became 'unsupported'"


@pytest.mark.parametrize("backend", ["dynamo", "onnx"])
def test_hfexport_passes_what_the_faults_fail(backend, tmp_path):
    """hfexport passes every selection above on this backend: the suite's smoke run in the test command."""
    selection = " or ".join(sorted({f"({s})" for _, s, _ in FAULTS.values()}))
    code, rows, output = run_suite("hfexport", backend, selection, tmp_path / "report.json", fresh=True)
    bad = [(r["model"], r["check"], r["status"], r["message"][:200]) for r in rows
           if r["status"] not in ("pass", "xfail")]
    assert code == 0 and rows and not bad, (f"hfexport does not pass the fault selections on {backend}: {bad}\n"
                                            f"{output[-4000:]}")
    noise = [line for line in output.splitlines() if NOISE.search(line)]
    assert not noise, "the suite's output holds warning lines:\n" + "\n".join(noise[:20])


@pytest.mark.parametrize("backend", ["dynamo", "onnx", "executorch"])
def test_a_two_percent_error_inside_one_layer_fails_the_plain_export_on_every_backend(backend, tmp_path):
    """faults.scaled_layer1_mlp: llama's layer-1 MLP 2% too large inside the program. The tolerances are measured
    (``python -m conformance.tolerances``), so the fault fails every backend (ExecuTorch's former 1e-3 let it pass)."""
    code, rows, output = run_suite("faults.scaled_layer1_mlp", backend, "test_plain_export_matches_eager and llama",
                                   tmp_path / "report.json")
    assert code == 1 and [r["status"] for r in rows] == ["fail"], (rows, output[-3000:])
    assert rows[0]["worst_output"] == "logits" and rows[0]["ratio"] > 1
    # The locator names the perturbed module, in the failure message and on the report row.
    assert rows[0]["first_divergence"] == "model.layers.1.mlp", (rows, output[-3000:])
    assert "first diverging module: model.layers.1.mlp (LlamaMLP)" in output, output[-3000:]


def test_a_forked_run_reports_what_a_fresh_interpreter_reports(tmp_path):
    """The fault runs above fork from the preloaded server: the same run in a new interpreter gives the same."""
    fault, (backend, selection, _) = "config_ignores_unknown_fields", FAULTS["config_ignores_unknown_fields"]
    runs = [run_suite(f"faults.{fault}", backend, selection, tmp_path / f"{mode}.json", fresh=mode == "fresh")
            for mode in ("forked", "fresh")]
    (forked_code, forked_rows, forked_output), (fresh_code, fresh_rows, _) = runs
    assert forked_code == fresh_code == 1
    assert [(r["nodeid"], r["status"], r["message"]) for r in forked_rows] == \
        [(r["nodeid"], r["status"], r["message"]) for r in fresh_rows]
    assert "PytestAssertRewriteWarning" not in forked_output  # the server forgot every module pytest rewrites

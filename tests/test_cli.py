"""The ``hfexport`` command line, run the way users run it: a subprocess, exit codes, stdout JSON, files.

Exports are the slow part, so each artifact folder is built once per session and shared by
the xdist workers (a file lock decides who builds it). Option checks that need no export run
``hfexport.cli.main`` in-process, which is the same code the console script calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from hfexport import cli
from pytest_hfexport.compare import FP32_ATOL

REPO = Path(__file__).resolve().parents[1]
PROMPT = "5,6,7,8"


def hfx(*args: Any, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m hfexport ARGS`` from the repository root."""
    return subprocess.run([sys.executable, "-m", "hfexport", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def hfx_patched(setup: str, *args: Any, timeout: float = 600) -> subprocess.CompletedProcess:
    """The CLI in a subprocess after ``setup`` (Python source) has monkeypatched something."""
    code = f"import sys\n{setup}\nfrom hfexport.cli import main\nsys.exit(main({[str(a) for a in args]!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


# -- shared folders ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session sees (the parent of the per-worker base temp)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "hfexport_cli"
    path.mkdir(exist_ok=True)
    return path


def shared(shared_dir: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``shared_dir/name``, built once per session under a lock; a failed build is retried, not cached."""
    from filelock import FileLock

    path = shared_dir / name
    with FileLock(str(shared_dir / f"{name}.lock")):
        if not (shared_dir / f"{name}.done").exists():
            build(path)
            (shared_dir / f"{name}.done").touch()
    return path


def save_zoo(name: str) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        from conformance.zoo import get

        get(name).model().save_pretrained(str(path))

    return build


@pytest.fixture(scope="session")
def llama_dir(shared_dir) -> Path:
    """A tiny llama as save_pretrained writes it (config.json + safetensors): what the CLI reads."""
    return shared(shared_dir, "llama", save_zoo("llama"))


@pytest.fixture(scope="session")
def bert_dir(shared_dir) -> Path:
    return shared(shared_dir, "bert", save_zoo("bert"))


@pytest.fixture(scope="session")
def dynamo_decode_dir(shared_dir, llama_dir) -> Path:
    """The static-cache generation export 'hfexport run' drives; --dynamic is implied (symbolic query axis)."""
    def build(out: Path) -> None:
        proc = hfx("export", llama_dir, "--format", "dynamo", "-o", out, "--for-generation", "--multi-token-decode",
                   "--static-cache", 32, "-q")
        assert proc.returncode == 0, explain(proc)

    return shared(shared_dir, "out_dynamo_decode", build)


@pytest.fixture(autouse=True)
def _leave_logging_alone(monkeypatch):
    """In-process main() would configure logging and warnings for the whole worker; other tests' caplog needs them."""
    monkeypatch.setattr(cli, "_configure_logging", lambda args: None)


# -- usage errors: exit 2, and the message says what to do ---------------------------------------

def test_folder_without_config_exits_2_with_json(tmp_path):
    proc = hfx("export", tmp_path, "--format", "onnx", "-o", tmp_path / "out", "--json")
    assert proc.returncode == 2, explain(proc)
    assert "save_pretrained" in proc.stderr  # says what a model folder is
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 2 and result["status"] == "usage_error" and "config.json" in result["error"]
    assert not (tmp_path / "out").exists()  # nothing written for a usage error


@pytest.mark.parametrize("case", ["missing path", "a file", "unknown format"])
def test_bad_paths_and_formats_exit_2(case, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("x")
    path, fmt, advice = {"missing path": (tmp_path / "nowhere", "dynamo", "save_pretrained"),
                         "a file": (tmp_path / "file.txt", "dynamo", "holds config.json"),
                         "unknown format": (tmp_path, "tflite", "dynamo, onnx, executorch")}[case]
    assert cli.main(["export", str(path), "--format", fmt, "-o", str(tmp_path / "out")]) == 2
    assert advice in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_argparse_errors_exit_2():
    proc = hfx("export")
    assert proc.returncode == 2 and "--help" in proc.stderr, explain(proc)


def _launch(code: str) -> dict:
    """Run ``code`` in a fresh interpreter after the console script's launcher is imported; its JSON line."""
    prelude = "import io, json, sys, contextlib\nimport hfexport_launcher\n"
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, explain(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_console_script_help_and_usage_errors_import_no_torch():
    """``hfexport --help`` and a usage error answer without importing torch or transformers (start-up time)."""
    seen = _launch(
        "codes = []\n"
        "for argv in (['--help'], ['export', '/no/such/folder', '--format', 'onnx', '-o', '/tmp/x']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "        try:\n"
        "            codes.append(hfexport_launcher.main(argv))\n"
        "        except SystemExit as exc:\n"
        "            codes.append(exc.code)\n"
        "print(json.dumps({'codes': codes, 'heavy': sorted(m for m in ('torch', 'transformers') if m in sys.modules)}))\n"
    )
    assert seen == {"codes": [0, 2], "heavy": []}


def test_deferred_api_loads_and_registers_cache_pytrees_on_first_use():
    """After a console-script launch the API still works: its first name imports it and registers the pytrees."""
    seen = _launch(
        "import hfexport\n"
        "before = 'torch' in sys.modules\n"
        "exporter = hfexport.AutoHfExporter\n"
        "from torch.utils._pytree import SUPPORTED_NODES\n"
        "from transformers.cache_utils import StaticCache\n"
        "print(json.dumps({'before': before, 'name': exporter.__name__, 'static': StaticCache in SUPPORTED_NODES}))\n"
    )
    assert seen == {"before": False, "name": "AutoHfExporter", "static": True}


@pytest.mark.parametrize("extra, advice", [
    (["--format", "dynamo", "--static-cache", "32"], "add --for-generation"),
    (["--format", "dynamo", "--multi-token-decode"], "add --for-generation"),
    (["--format", "dynamo", "--backend", "xnnpack"], "--format executorch"),
    (["--format", "dynamo", "--opset", "18"], "--format onnx"),
    (["--format", "onnx", "--opset", "17"], "18 or more"),
    (["--format", "dynamo", "--atol", "0.1"], "add --check"),
    (["--format", "dynamo", "--for-generation", "--static-cache", "8"], "--static-cache 16"),
])
def test_option_combinations_are_usage_errors(extra, advice, llama_dir, tmp_path, capsys):
    assert cli.main(["export", str(llama_dir), "-o", str(tmp_path / "out"), *extra]) == 2
    assert advice in capsys.readouterr().err


def test_for_generation_on_a_model_that_cannot_generate_is_a_usage_error(bert_dir, tmp_path, capsys):
    assert cli.main(["export", str(bert_dir), "--format", "dynamo", "-o", str(tmp_path), "--for-generation"]) == 2
    assert "drop --for-generation" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "hfexport.json").read_text())
    assert manifest["status"] == "usage_error" and manifest["model_class"] == "BertModel"


def test_run_usage_errors(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path), "--prompt-ids", "1,2"]) == 2
    assert "--for-generation --multi-token-decode --static-cache" in capsys.readouterr().err
    assert cli.main(["run", str(tmp_path / "nowhere"), "--prompt-ids", "1,2"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", str(tmp_path), "--prompt-ids", "a,b"])
    assert exc.value.code == 2


# -- export and --check ---------------------------------------------------------------------------

def test_export_dynamo_check_json(llama_dir, tmp_path):
    out = tmp_path / "out"
    proc = hfx("export", llama_dir, "--format", "dynamo", "-o", out, "--check", "--json")
    assert proc.returncode == 0, explain(proc)
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 0 and result["status"] == "checked"
    assert result["model_class"] == "LlamaForCausalLM" and result["components"]["model"]["file"] == "model.pt2"
    (check,) = result["check"]
    assert check["status"] == "pass" and check["tolerance"] == FP32_ATOL["dynamo"]
    assert {r["output"] for r in check["outputs"]} >= {"logits", "past_key_values.layers.0.keys"}
    assert all(r["max_abs_error"] <= FP32_ATOL["dynamo"] for r in check["outputs"])
    manifest = json.loads((out / "hfexport.json").read_text())
    assert manifest["files"] == ["model.pt2"] and (out / "model.pt2").is_file()
    assert manifest["versions"]["torch"] and manifest["model_config"]["model_type"] == "llama"
    assert manifest["export_config"]["export_format"] == "dynamo" and manifest["export_config"]["dynamic"] is False
    assert manifest["sample_inputs"]["input_ids"]["shape"] == [1, 8] and manifest["errors"] == []
    assert "[hfexport] exporting LlamaForCausalLM to dynamo" in proc.stderr  # progress on stderr, not stdout


def test_check_mismatch_exits_1(bert_dir, tmp_path):
    """An artifact whose outputs drift from eager (forced here by perturbing the runner) fails --check."""
    setup = ("import hfexport.runtime.dynamo as d\n"
             "_run = d.DynamoRunner.run_flat\n"
             "d.DynamoRunner.run_flat = lambda self, flat: {k: v + 1e-3 if v.is_floating_point() else v "
             "for k, v in _run(self, flat).items()}")
    proc = hfx_patched(setup, "export", bert_dir, "--format", "dynamo", "-o", tmp_path, "--check")
    assert proc.returncode == 1, explain(proc)
    assert "MISMATCH" in proc.stdout and "last_hidden_state" in proc.stdout
    manifest = json.loads((tmp_path / "hfexport.json").read_text())
    assert manifest["status"] == "mismatch" and manifest["model_class"] == "BertModel"
    assert abs(manifest["check"][0]["max_abs_error"] - 1e-3) < 1e-4


def test_unexportable_model_exits_3(llama_dir, tmp_path):
    proc = hfx("export", llama_dir, "--format", "dynamo", "-o", tmp_path, "--attn-implementation", "flex_attention")
    assert proc.returncode == 3, explain(proc)
    assert "sdpa" in proc.stderr  # says what to do
    manifest = json.loads((tmp_path / "hfexport.json").read_text())
    assert manifest["status"] == "failed" and "FlexAttention" in manifest["errors"][0]
    assert manifest["files"] == []


# -- run: the exported static-cache decode loop against eager generate ----------------------------

def test_run_dynamo_decode_loop_matches_eager(dynamo_decode_dir, llama_dir):
    manifest = json.loads((dynamo_decode_dir / "hfexport.json").read_text())
    assert set(manifest["components"]) == {"prefill", "decode"} and manifest["dynamic"] is True
    assert (dynamo_decode_dir / "decode.pt2").is_file() and (dynamo_decode_dir / "prefill.pt2").is_file()
    proc = hfx("run", dynamo_decode_dir, "--prompt-ids", PROMPT, "--max-new-tokens", 8, "--compare-eager", llama_dir)
    assert proc.returncode == 0, explain(proc)
    assert "match: yes" in proc.stdout and "tokens/s" in proc.stdout
    tokens = next(line for line in proc.stdout.splitlines() if line.startswith("tokens:"))
    eager = next(line for line in proc.stdout.splitlines() if line.startswith("eager:"))
    assert tokens.split(":")[1].strip() == eager.split(":")[1].strip()
    assert len(tokens.split(":")[1].split(",")) == 8


def test_run_json_and_token_mismatch_exits_1(dynamo_decode_dir, llama_dir):
    setup = ("import hfexport.cli.run as c\n"  # eager 'generates' other tokens; no need to load the model
             "c.load_model = lambda *a, **k: None\n"
             "c.eager_generate = lambda model, prompt, n, cache_len: ([0] * n, 0.1)")
    proc = hfx_patched(setup, "run", dynamo_decode_dir, "--prompt-ids", PROMPT, "--max-new-tokens", 4,
                       "--compare-eager", llama_dir, "--json")
    assert proc.returncode == 1, explain(proc)
    result = json.loads(proc.stdout)
    assert result["match"] is False and result["backend"] == "dynamo" and len(result["tokens"]) == 4
    assert result["tokens_per_s"] > 0 and result["max_cache_len"] == 32


@pytest.mark.parametrize("fmt, extra", [
    ("onnx", []),
    # The portable (undelegated) lowering exports in half the time of XNNPACK; the runtime loop is the same.
    ("executorch", ["--backend", "portable"]),
])
def test_run_other_backends_decode_loop_matches_eager(fmt, extra, shared_dir, llama_dir):
    def build(out: Path) -> None:
        proc = hfx("export", llama_dir, "--format", fmt, *extra, "-o", out, "--for-generation",
                   "--multi-token-decode", "--static-cache", 32, "--check", "--json", "-q")
        assert proc.returncode == 0, explain(proc)
        checks = json.loads(proc.stdout)["check"]
        assert [c["artifact"] for c in checks] == [f"prefill{suffix}", f"decode{suffix}"]
        assert all(c["status"] == "pass" and c["tolerance"] == FP32_ATOL[fmt] for c in checks), checks

    suffix = cli.suffix_of(fmt)
    out = shared(shared_dir, f"out_{fmt}_decode", build)
    assert (out / f"decode{suffix}").is_file()
    proc = hfx("run", out, "--prompt-ids", PROMPT, "--max-new-tokens", 8, "--compare-eager", llama_dir, "--json")
    assert proc.returncode == 0, explain(proc)
    result = json.loads(proc.stdout)
    assert result["backend"] == fmt and result["match"] is True and len(result["tokens"]) == 8, result


# -- env ------------------------------------------------------------------------------------------

def test_env_reports_pins_and_backends():
    proc = hfx("env", "--json")
    assert proc.returncode == 0, explain(proc)
    result = json.loads(proc.stdout)
    torch_row = next(p for p in result["packages"] if p["package"] == "torch")
    assert torch_row["pinned"] and torch_row["installed"] and torch_row["status"] in ("ok", "in window")
    backends = {b["backend"]: b for b in result["backends"]}
    assert set(backends) >= {"dynamo", "onnx", "executorch"}
    assert backends["dynamo"]["usable"] is True and backends["dynamo"]["decode_loop"] == "ok"


def test_env_table(capsys):
    assert cli.main(["env"]) == 0
    out = capsys.readouterr().out
    assert "package" in out and "pinned" in out and "backend" in out and "dynamo" in out

"""The coverage sweep's parts: shrinking, enumeration, worker isolation, resume and the failure-cause buckets.

Fast: no export runs here. Worker tests fork (the fork server's preload is for real sweeps) and replace the
model build and the cell function, so they measure the sweep's bookkeeping, not an exporter.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from conformance.coverage import build as build_module
from conformance.coverage import cells as cells_module
from conformance.coverage.cli import plan
from conformance.coverage.enumerate import Architecture, architectures
from conformance.coverage.normalise import cause, normalise
from conformance.coverage.runner import Sweep, Task
from conformance.coverage.shrink import HEADS, LAYERS, WIDTH, tiny_config
from conformance.coverage.store import Store, cell_key


@pytest.fixture(autouse=True)
def environment_restored():
    """A sweep sets its workers' environment in the process that starts them (PYTHONWARNINGS=ignore,
    OMP_NUM_THREADS=1, ...); here that process is a test worker, whose later tests and subprocesses must not
    inherit it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def parameters(model_class: Any, config: Any) -> int:
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "config_class, model_class, limit",
    [
        ("LlamaConfig", "LlamaForCausalLM", 100_000),
        ("BertConfig", "BertForMaskedLM", 100_000),
        ("T5Config", "T5ForConditionalGeneration", 100_000),
        ("ViTConfig", "ViTForImageClassification", 100_000),
        ("LlavaConfig", "LlavaForConditionalGeneration", 200_000),
    ],
)
def test_shrinker_makes_tiny_configs(config_class, model_class, limit):
    default = getattr(transformers, config_class)()
    config = tiny_config(getattr(transformers, config_class))
    count = parameters(getattr(transformers, model_class), config)
    assert count < limit, f"{model_class} has {count} parameters after shrinking"
    # The default checkpoint is orders of magnitude larger: the shrink really happened.
    assert count * 100 < parameters(getattr(transformers, model_class), default)


def test_shrinker_keeps_divisibility_and_sub_configs():
    llama = tiny_config(transformers.LlamaConfig)
    assert (llama.hidden_size, llama.num_hidden_layers, llama.num_attention_heads) == (WIDTH, LAYERS, HEADS)
    mistral = tiny_config(transformers.MistralConfig)  # 32 query heads over 8 key/value heads by default
    assert mistral.num_attention_heads % mistral.num_key_value_heads == 0
    assert mistral.num_key_value_heads < mistral.num_attention_heads  # grouped-query attention stays grouped
    t5 = tiny_config(transformers.T5Config)
    assert (t5.d_model, t5.num_layers, t5.num_decoder_layers, t5.num_heads, t5.d_kv) == (WIDTH, LAYERS, LAYERS, 4, 8)
    llava = tiny_config(transformers.LlavaConfig)
    assert llava.text_config.hidden_size == llava.vision_config.hidden_size == WIDTH
    assert llava.vision_config.image_size % llava.vision_config.patch_size == 0
    # The image token id must index the shrunk vocabulary of the text sub-config.
    assert 0 <= llava.image_token_index < llava.text_config.vocab_size


def test_enumeration_finds_every_head():
    found = architectures()
    names = [a.name for a in found]
    assert len(found) > 100
    assert len(names) == len(set(names)), "a class is measured once"
    by_name = {a.name: a for a in found}
    assert by_name["LlamaForCausalLM"].head == "causal_lm" and by_name["LlamaForCausalLM"].config_class == "LlamaConfig"
    assert by_name["BertModel"].head == "base"
    assert by_name["ViTForImageClassification"].head == "image_classification"
    assert {"causal_lm", "seq2seq_lm", "masked_lm", "image_classification", "base"} <= {a.head for a in found}
    per_type = architectures(scope="types")
    assert len({a.model_type for a in per_type}) == len(per_type) < len(found)
    assert "LlamaForCausalLM" in {a.name for a in per_type} and "LlamaModel" not in {a.name for a in per_type}
    assert [a.name for a in architectures("^LlamaFor", limit=1)] == [architectures("^LlamaFor")[0].name]


def test_a_tiny_model_builds_with_inputs_eager_accepts():
    arch = Architecture("LlamaForCausalLM", "causal_lm", "llama", "LlamaConfig")
    built = build_module.build(arch)
    assert built.level == 0 and built.parameters < 100_000
    assert tuple(built.sample["input_ids"].shape) == (1, 6)
    assert built.other is not None and tuple(built.other["input_ids"].shape) == (2, 9)


def test_a_causal_lm_head_of_an_encoder_architecture_is_built_as_a_decoder():
    """Without is_decoder=True, RoBERTa's causal LM never writes its cache: generate() ran a model nobody deploys
    and every exporter failed its serving (the cache inputs were missing)."""
    built = build_module.build(Architecture("RobertaForCausalLM", "causal_lm", "roberta", "RobertaConfig"))
    assert built.model.config.is_decoder is True and any("is_decoder" in note for note in built.notes)
    llama = build_module.build(Architecture("LlamaForCausalLM", "causal_lm", "llama", "LlamaConfig"))
    assert not any("is_decoder" in note for note in llama.notes)  # decoder-only configs are left alone


def test_unbuildable_architectures_say_why():
    arch = Architecture("NoSuchModelForCausalLM", "causal_lm", "nope", "NoSuchConfig")
    with pytest.raises(build_module.NotBuildable) as raised:
        build_module.build(arch)
    assert raised.value.stage == "import" and "AttributeError" in raised.value.reason


# -- workers ------------------------------------------------------------------------------------------------


class FakeAdapter:
    name = "fake"


def fake_build(arch: Architecture) -> build_module.Built:
    return build_module.Built(arch, None, {}, None, 0, "text", 1)


def sweep_cells(monkeypatch, tmp_path, cell, backends, timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """Run one task through real worker processes (forked) with the build and the cell function replaced."""
    import pytest_hfexport.adapters

    monkeypatch.setattr(pytest_hfexport.adapters, "resolve", lambda name: FakeAdapter())
    monkeypatch.setattr(build_module, "build", fake_build)
    monkeypatch.setattr(cells_module, "run_cell", cell)
    records: dict[str, dict[str, Any]] = {}
    sweep = Sweep(
        "fake",
        lambda arch, backend, record: records.__setitem__(backend, record),
        jobs=1,
        timeout=timeout,
        logs=tmp_path / "logs",
        start_method="fork",
    )
    sweep.run([Task(Architecture("TinyModel", "base", "tiny", "TinyConfig"), list(backends))])
    return records


def passing(adapter, built, backend, workdir, generation=True):
    return {"status": "pass", "stage": "", "message": "", "checks": {"export": {"status": "pass"}}}


def test_an_exception_in_a_cell_is_one_failed_cell(monkeypatch, tmp_path):
    def cell(adapter, built, backend, workdir, generation=True):
        if backend == "onnx":
            raise RuntimeError("exporter exploded at node 17")
        return passing(adapter, built, backend, workdir)

    records = sweep_cells(monkeypatch, tmp_path, cell, ["dynamo", "onnx"])
    assert records["dynamo"]["status"] == "pass"
    assert records["onnx"]["status"] == "fail" and records["onnx"]["stage"] == "harness"
    assert "exporter exploded" in records["onnx"]["message"]


def test_a_crashing_worker_costs_one_cell(monkeypatch, tmp_path):
    def cell(adapter, built, backend, workdir, generation=True):
        if backend == "onnx":
            os._exit(3)  # a native runtime dying: no Python exception, no clean-up
        return passing(adapter, built, backend, workdir)

    records = sweep_cells(monkeypatch, tmp_path, cell, ["dynamo", "onnx", "executorch"])
    assert records["dynamo"]["status"] == "pass"
    assert records["onnx"]["status"] == "fail" and records["onnx"]["stage"] == "crash"
    assert "exit code 3" in records["onnx"]["message"]
    assert records["executorch"]["status"] == "pass"  # requeued in a fresh worker


def test_a_hanging_cell_times_out(monkeypatch, tmp_path):
    def cell(adapter, built, backend, workdir, generation=True):
        if backend == "dynamo":
            time.sleep(60)
        return passing(adapter, built, backend, workdir)

    start = time.monotonic()
    records = sweep_cells(monkeypatch, tmp_path, cell, ["dynamo", "onnx"], timeout=1.0)
    assert time.monotonic() - start < 30
    assert records["dynamo"]["status"] == "fail" and records["dynamo"]["stage"] == "timeout"
    assert records["onnx"]["status"] == "pass"


# -- resume -------------------------------------------------------------------------------------------------


def test_resume_reuses_equal_versions_and_remeasures_changed_ones(tmp_path: Path):
    arch = Architecture("LlamaForCausalLM", "causal_lm", "llama", "LlamaConfig")
    versions = {"torch": "2.13.0", "transformers": "5.23.0", "impl_version": "0.1.0", "sweep": "1"}
    store = Store(tmp_path / "hfexport.json", "hfexport")
    store.put(cell_key(arch.name, arch.head, "dynamo"), {"status": "pass", "versions": versions})
    store.save()
    reloaded = Store(tmp_path / "hfexport.json", "hfexport")

    tasks, reused, _ = plan([arch], ["dynamo", "onnx"], reloaded, versions)
    assert reused == 1 and [t.backends for t in tasks] == [["onnx"]]

    changed = {**versions, "torch": "2.14.0"}
    tasks, reused, _ = plan([arch], ["dynamo", "onnx"], reloaded, changed)
    assert reused == 0 and [t.backends for t in tasks] == [["dynamo", "onnx"]]

    tasks, reused, _ = plan([arch], ["dynamo", "onnx"], reloaded, versions, fresh=True)
    assert reused == 0 and [t.backends for t in tasks] == [["dynamo", "onnx"]]


# -- failure causes -----------------------------------------------------------------------------------------


def test_causes_merge_messages_that_differ_only_in_numbers():
    a = "output 'logits' shape (2, 9, 256) != eager (2, 7, 256)"
    b = "output 'logits' shape (1, 4, 128) != eager (1, 3, 128)"
    assert cause("mismatch", a) == cause("mismatch", b)
    assert cause("mismatch", a) != cause("run", a)
    assert normalise("Could not guard on data-dependent expression Eq(u7, 1) at 0x7f3a2c") == normalise(
        "Could not guard on data-dependent expression Eq(u12, 1) at 0x55d1e0"
    )
    assert normalise("Constraints violated (s0)! max 4096") == normalise("Constraints violated (s3)! max 8")
    # Different causes stay apart, and names with digits in them are kept.
    assert normalise("dtype float32 != eager int64") != normalise("dtype float16 != eager int64")
    assert normalise("KeyError: 'past_key_values'") != normalise("KeyError: 'cache_position'")


# -- triage -------------------------------------------------------------------------------------------------


def test_every_failing_cell_is_listed_with_its_triage_or_as_not_triaged(monkeypatch):
    from conformance.coverage import report, triage

    entry = triage.Triage("^SiglipFor", "dynamo", r"Guard failed: .*size\(\)\[0\] == 1", triage.FIX, "view pins batch")
    monkeypatch.setattr(triage, "TRIAGE", (entry,))

    def cell(arch: str, backend: str, message: str) -> dict[str, Any]:
        return {"arch": arch, "backend": backend, "status": "fail", "stage": "run", "message": message}

    cells = {
        "a": cell("SiglipForImageClassification", "dynamo", "AssertionError: Guard failed: x.size()[0] == 1"),
        "b": cell("SiglipForImageClassification", "onnx", "AssertionError: Guard failed: x.size()[0] == 1"),
        "c": cell("HieraModel", "dynamo", "AssertionError: Guard failed: x.size()[0] == 1"),
        "d": {**cell("BertModel", "dynamo", ""), "status": "pass"},
    }
    text = "\n".join(report.triaged_failures(cells))
    assert "3 failing cells; 2 not triaged yet" in text
    assert "| SiglipForImageClassification | dynamo | run: AssertionError: Guard failed: x.size()[<n>] == <n> | fix: view pins batch |" in text
    assert "| SiglipForImageClassification | onnx |" in text and "| HieraModel | dynamo |" in text
    assert text.count("not triaged |") == 2 and "BertModel" not in text


# -- report -------------------------------------------------------------------------------------------------


def test_the_time_section_says_what_finishing_the_default_scope_takes():
    from conformance.coverage import report

    versions = {"torch": "2.13.0", "transformers": "5.23.0", "impl_version": "0.1.0", "sweep": "3"}

    def cell(arch: str, backend: str) -> dict:
        return {"arch": arch, "head": "causal_lm", "backend": backend, "status": "pass", "stage": "", "message": "",
                "seconds": 10.0, "checks": {}, "build": {}, "versions": versions, "model_type": arch.lower()}

    data = {
        "impl": "hfexport",
        "cells": {f"{a}|causal_lm|{b}": cell(a, b) for a in ("A", "B") for b in ("dynamo", "onnx")},
        "runs": [{"seconds": 40.0, "measured": 4, "reused": 0, "command": "python -m conformance.coverage",
                  "started": "2026-12-04T00:00:00+00:00", "versions": versions, "impl_revision": "abc"}],
    }
    # 10 classes, 5 of them in the default scope (two measured): 6 scope cells left at 10 s per cell.
    text = report.render({"hfexport": data}, 10, None, type_scope={"A", "B", "C", "D", "E"})
    assert "the 16 cells not yet measured need about 0.0 h more" in text
    assert "Of the default scope (one class per model type, 5 classes), 6 cells are not yet measured" in text


def test_a_budgeted_sweep_records_the_cells_it_measured_not_the_ones_it_planned(monkeypatch, tmp_path):
    """A sweep whose budget runs out stores how many cells it measured: the report's rate divides by it."""

    from conformance.coverage import cli, runner

    class HalfSweep:
        def __init__(self, impl, on_record, **_):
            self.on_record = on_record

        def run(self, tasks, deadline=None):
            first = tasks[0]
            for backend in first.backends:
                self.on_record(first.arch, backend, {"status": "pass", "stage": "", "message": "", "checks": {}})
            return len(tasks) - 1

    monkeypatch.setattr(runner, "Sweep", HalfSweep)
    args = cli.parse_args(["--only", "^(LlamaForCausalLM|BertModel)$", "--out", str(tmp_path), "--no-progress"])
    cli.sweep(args, "test")
    run = json.loads((tmp_path / "hfexport.json").read_text())["runs"][-1]
    assert (run["measured"], run["planned"], run["left_for_later"]) == (2, 4, 1)


def test_a_not_buildable_verdict_serves_the_next_sweep_without_a_build(monkeypatch, tmp_path):
    """Building is the suite's work: the peer's sweep (here: a sweep with the first one's cells gone) records
    an architecture the first sweep could not build from that verdict, and starts no worker for it."""
    from conformance.coverage import cli, runner

    started: list[list[str]] = []
    bert_stage = ["config"]

    class RecordingSweep:
        def __init__(self, impl, on_record, **_):
            self.on_record = on_record

        def run(self, tasks, deadline=None):
            for task in tasks:
                started.append([task.arch.name, *task.backends])
                for backend in task.backends:
                    if task.arch.name == "BertModel":
                        record = {"status": "not_buildable", "stage": bert_stage[0], "message": "ValueError: too small"}
                    else:
                        record = {"status": "pass", "stage": "", "message": ""}
                    self.on_record(task.arch, backend, {**record, "checks": {}})
            return 0

    monkeypatch.setattr(runner, "Sweep", RecordingSweep)
    argv = ["--only", "^(LlamaForCausalLM|BertModel)$", "--out", str(tmp_path), "--no-progress"]
    cli.sweep(cli.parse_args(argv), "first")
    assert sorted(name for name, *_ in started) == ["BertModel", "LlamaForCausalLM"]

    (tmp_path / "hfexport.json").unlink()
    started.clear()
    cli.sweep(cli.parse_args(argv), "second")
    assert [name for name, *_ in started] == ["LlamaForCausalLM"]
    cells = json.loads((tmp_path / "hfexport.json").read_text())["cells"]
    bert = [r for r in cells.values() if r["arch"] == "BertModel"]
    assert len(bert) == 2 and all(r["status"] == "not_buildable" and r["stage"] == "config" for r in bert)
    assert all(r["build_verdict_reused"] and r["message"] == "ValueError: too small" for r in bert)

    # A worker killed or crashed while building gives no verdict: the next sweep builds again.
    for path in tmp_path.glob("*.json"):
        path.unlink()
    bert_stage[0] = "timeout"
    cli.sweep(cli.parse_args(argv), "third")
    (tmp_path / "hfexport.json").unlink()
    started.clear()
    cli.sweep(cli.parse_args(argv), "fourth")
    assert sorted(name for name, *_ in started) == ["BertModel", "LlamaForCausalLM"]


def test_a_committed_sweep_seeds_cells_of_the_same_versions_only(monkeypatch, tmp_path):
    """``--seed``: the peer's committed cells are reused where their versions are the current ones (no worker
    starts for them), measured again where not, and the report says which cells came from the seed."""
    from conformance.coverage import cli, report, runner

    started: list[str] = []

    class RecordingSweep:
        def __init__(self, impl, on_record, **_):
            self.on_record = on_record

        def run(self, tasks, deadline=None):
            for task in tasks:
                started.append(task.arch.name)
                for backend in task.backends:
                    self.on_record(task.arch, backend, {"status": "pass", "stage": "", "message": "", "checks": {}})
            return 0

    monkeypatch.setattr(runner, "Sweep", RecordingSweep)
    seed_dir, out = tmp_path / "seed", tmp_path / "out"
    argv = ["--only", "^(LlamaForCausalLM|BertModel)$", "--no-progress"]
    cli.sweep(cli.parse_args([*argv, "--out", str(seed_dir)]), "the committed sweep")
    seed = json.loads((seed_dir / "hfexport.json").read_text())
    old = {**seed["cells"]["BertModel|base|dynamo"]["versions"], "torch": "2.12.0"}
    for key in ("BertModel|base|dynamo", "BertModel|base|onnx"):
        seed["cells"][key]["versions"] = old
    (seed_dir / "hfexport.json").write_text(json.dumps(seed))

    started.clear()
    cli.sweep(cli.parse_args([*argv, "--out", str(out), "--seed", str(seed_dir)]), "seeded")
    assert started == ["BertModel"]  # Llama's seeded cells reused; Bert's are of another torch
    stored = json.loads((out / "hfexport.json").read_text())
    llama = [r for r in stored["cells"].values() if r["arch"] == "LlamaForCausalLM"]
    bert = [r for r in stored["cells"].values() if r["arch"] == "BertModel"]
    assert len(llama) == 2 and all(r["seeded_from"] == str(seed_dir / "hfexport.json") for r in llama)
    assert len(bert) == 2 and not any("seeded_from" in r for r in bert)

    # A sweep whose budget runs out before it measures anything keeps none of the seed's stale cells.
    class IdleSweep(RecordingSweep):
        def run(self, tasks, deadline=None):
            return len(tasks)

    monkeypatch.setattr(runner, "Sweep", IdleSweep)
    cli.sweep(cli.parse_args([*argv, "--out", str(tmp_path / "idle"), "--seed", str(seed_dir)]), "idle")
    idle = json.loads((tmp_path / "idle" / "hfexport.json").read_text())["cells"]
    assert sorted(idle) == ["LlamaForCausalLM|causal_lm|dynamo", "LlamaForCausalLM|causal_lm|onnx"]
    assert [r["command"] for r in stored["runs"]] == ["the committed sweep", "seeded"]
    text = report.render({"hfexport": stored}, None, None)
    assert f"2 of its cells are reused from the committed sweep `{seed_dir / 'hfexport.json'}`" in text

"""The coverage sweep's parts: shrinking, enumeration, building, the failure-cause buckets, and the sweep as a pytest
collection (one item per architecture x backend x check, kept out of other runs, sharded, known failures).

Fast: the collection tests only collect (a subprocess each, as a user runs it); one runs a single export of a
seeded-fault implementation to see a known failure become a strict xfail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from conformance.coverage import build as build_module
from conformance.coverage import rows
from conformance.coverage.cells import SAMPLE_OK
from conformance.coverage.enumerate import Architecture, architectures
from conformance.coverage.normalise import cause, normalise
from conformance.coverage.shrink import HEADS, LAYERS, WIDTH, tiny_config
from pytest_hfexport.selection import shard_of

ROOT = Path(__file__).resolve().parents[1]
LLAMA = "--coverage-only=^LlamaForCausalLM$"


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
    assert (
        "| SiglipForImageClassification | dynamo | run: AssertionError: Guard failed: x.size()[<n>] == <n> | fix: view pins batch |"
        in text
    )
    assert "| SiglipForImageClassification | onnx |" in text and "| HieraModel | dynamo |" in text
    assert text.count("not triaged |") == 2 and "BertModel" not in text


# -- the sweep as a pytest collection ----------------------------------------------------------------------


def pytest_run(*args: str, impl_path: bool = False) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in the repository, as a user runs it (tests/ on the path for ``faults.*``)."""
    env = dict(os.environ)
    paths = [str(ROOT)] + ([str(ROOT / "tests")] if impl_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def collected(*args: str) -> list[str]:
    done = pytest_run("--collect-only", "-q", *args)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_collection_is_one_item_per_architecture_backend_and_check():
    ids = collected("conformance/coverage", "--hfexport-backend=dynamo,onnx,executorch", LLAMA)
    sweep = "conformance/coverage/test_sweep.py"
    assert sorted(ids) == sorted(
        f"{sweep}::test_{check}[{backend}-LlamaForCausalLM]"
        for check in ("export", "generation")
        for backend in ("dynamo", "onnx", "executorch")
    )
    # A non-generative head has no generation item; ExecuTorch is kept to its slice unless asked for every one.
    only = "--coverage-only=^ResNetForImageClassification$"
    assert collected("conformance/coverage", "--hfexport-backend=dynamo,executorch", only) == [
        f"{sweep}::test_export[dynamo-ResNetForImageClassification]"
    ]
    every = "--coverage-executorch=all"
    assert len(collected("conformance/coverage", "--hfexport-backend=executorch", only, every)) == 1


def test_the_sweep_stays_out_of_the_suites_own_runs():
    """`pytest conformance` (and `-m ""`) collects no coverage cell; --coverage-sweep adds them."""
    assert collected("conformance", "-m", "hfexport_coverage", "--hfexport-backend=dynamo") == []
    asked = collected(
        "conformance", "-m", "hfexport_coverage", "--hfexport-backend=dynamo", "--coverage-sweep", "types", LLAMA
    )
    assert len(asked) == 2


def test_shards_partition_the_collection():
    ids = [f"conformance/coverage/test_sweep.py::test_export[onnx-{a.name}]" for a in architectures(scope="types")]
    for shards in (1, 2, 5):
        parts = [{i for i in ids if shard_of(i, shards) == k} for k in range(1, shards + 1)]
        assert set().union(*parts) == set(ids) and sum(map(len, parts)) == len(ids)  # each id in exactly one
        assert shards == 1 or all(parts), "no shard is empty on hundreds of ids"
    only = "--coverage-only=^(Llama|Qwen2)ForCausalLM$"
    args = ("conformance/coverage", "--hfexport-backend=dynamo,onnx,executorch", only)
    whole = collected(*args)
    halves = [collected(*args, f"--hfexport-shard={k}/2") for k in (1, 2)]
    assert sorted(halves[0] + halves[1]) == sorted(whole) and not set(halves[0]) & set(halves[1])
    assert pytest_run("--collect-only", *args, "--hfexport-shard=3/2").returncode == 4  # a usage error


def test_a_known_failure_of_the_sweep_is_a_strict_xfail(tmp_path: Path):
    """An entry in the known-failures format (test id = measured message) makes the cell a strict xfail; the fault
    (outputs off by 1e-3) is what makes the export fail here."""
    node = "conformance/coverage/test_sweep.py::test_export[dynamo-LlamaForCausalLM]"
    known = tmp_path / "known.toml"
    known.write_text(f'"{node}" = "AssertionError: mismatch: output \'logits\' shape (1, 6, 256) float32"\n')
    report = tmp_path / "report.json"
    done = pytest_run(
        node,
        "--hfexport-impl=faults.perturbed_outputs",
        "--hfexport-no-cache",
        f"--hfexport-xfails={known}",
        f"--hfexport-report={report}",
        "-rxX",
        impl_path=True,
    )
    assert done.returncode == 0 and "1 xfailed" in done.stdout, done.stdout[-3000:]
    (row,) = json.loads(report.read_text())["rows"]
    assert (row["status"], row["stage"]) == ("xfail", "mismatch") and "output 'logits'" in row["message"]


def test_report_rows_fold_into_cells():
    def row(check: str, status: str, stage: str | None = None, message: str = "") -> dict[str, Any]:
        nodeid = f"{rows.SWEEP_FILE}::test_{check}[onnx-LlamaForCausalLM]"
        facts = {"model": "LlamaForCausalLM", "backend": "onnx", "check": check, "status": status, "stage": stage}
        return facts | {"message": message, "nodeid": nodeid, "seconds": 1.0}

    data = {
        "runs": [],
        "rows": [
            row("export", "xfail", "run", f"AssertionError: run: {SAMPLE_OK}Guard failed: input_ids.size()[0] == 1"),
            row("generation", "pass"),
        ],
    }
    verdicts = {"ASTModel|base": {"stage": "eager", "message": "IndexError: out of range"}}
    cells = rows.cells(data, {"LlamaForCausalLM": "causal_lm"}, verdicts)
    llama = cells["LlamaForCausalLM|causal_lm|onnx"]
    assert (llama["status"], llama["stage"]) == ("fail", "run")
    assert llama["message"] == "Guard failed: input_ids.size()[0] == 1"
    assert llama["checks"]["export"]["sample_ok"] and llama["checks"]["generation"]["status"] == "pass"
    assert cells["ASTModel|base|onnx"]["status"] == "not_buildable"


def test_a_cell_past_its_time_limit_fails_at_stage_timeout(tmp_path: Path):
    """The per-cell limit is a signal alarm in the test's thread: under pytest-xdist too (tests run on a worker's
    main thread), a cell that overruns fails at stage ``timeout`` and the next cell still runs."""
    report = tmp_path / "report.json"
    node = "conformance/coverage/test_sweep.py::test_export[dynamo-LlamaForCausalLM]"
    done = pytest_run(node, "-n", "1", "--coverage-timeout=0.05", "--hfexport-no-cache", f"--hfexport-report={report}")
    assert done.returncode == 1, done.stdout[-3000:]
    (row,) = json.loads(report.read_text())["rows"]
    assert (row["status"], row["stage"]) == ("fail", "timeout") and "--coverage-timeout" in row["message"]

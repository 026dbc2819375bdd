"""The parts of ``realsize.py`` that are not the measurement itself: the model shapes, the row a measurement
fills, the child process that measures an export's wall time and peak RSS, and the printed table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common

EAGER = "eager generate"
# Model name -> (transformers config class, its arguments): the published models' shapes, random weights.
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2": (
        "LlamaConfig",
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
    ),
    "qwen3-0.6b": (
        "Qwen3Config",
        {
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
        },
    ),
}


@dataclass
class Row:
    """One tool's figures for one model, backend and precision; None where it has no such figure."""

    model: str
    tool: str
    backend: str
    precision: str
    status: str = "ok"
    export_s: float | None = None
    export_peak_rss_mib: float | None = None
    artifact_mib: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    tokens: list[int] | None = None
    first_mismatch: int | None = None  # first position whose token differs from eager float32's
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Child:
    wall_s: float
    peak_rss_mib: float
    returncode: int
    log: str


# Linux starts a process's ru_maxrss at the RSS of the process that exec'd it, so a child started straight from
# this process (large, and larger with every artifact it has loaded) would read at least this process's size. A
# small launcher starts the export instead and writes the peak of the one child it waited for.
PEAK_RSS_LAUNCHER = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(code)"
)


def run_child(command: list[str], log: Path) -> Child:
    """Run ``command`` to the end: its wall time and its peak RSS (ru_maxrss: of it and the children it waited
    for, the largest of them)."""
    peak = log.with_suffix(".maxrss")
    start = time.perf_counter()
    with open(log, "w") as out:
        returncode = subprocess.call(
            [sys.executable, "-c", PEAK_RSS_LAUNCHER, str(peak), *command],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"},
        )
    wall_s = time.perf_counter() - start
    return Child(wall_s, int(peak.read_text()) / 1024, returncode, log.read_text())


def failure(log: str) -> str:
    """A failed child's exception line (the first unindented line after its last traceback's frames), else its
    last line of output."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    after = lines[starts[-1] + 1 :] if starts else []
    exception = next((line for line in after if not line[0].isspace()), None)
    return (exception or (lines[-1] if lines else "no output")).strip()[:200]


def unavailable(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"unavailable: {type(exc).__name__}: {first}"


def artifact_mib(directory: Path) -> float:
    """Every file the tool wrote but a tokenizer (which the model builder only copies), in MiB."""
    files = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("tokenizer")]
    return sum(p.stat().st_size for p in files) / 2**20


def figure(value: float | None, eager: float | None = None, specialist: float | None = None) -> str:
    """``value`` with its ratios to eager ("x e") and to the specialist ("x s"), where those exist."""
    if value is None:
        return "-"
    text = f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    ratios = [f"{value / ref:.2f}x {tag}" for ref, tag in ((eager, "e"), (specialist, "s")) if ref]
    return f"{text} ({', '.join(ratios)})" if ratios else text


def cells(row: Row, eager: Row | None, specialist: Row | None) -> list[str]:
    """One table line: each figure with its ratios to ``eager`` and ``specialist`` (None: no such ratio)."""

    def cell(name: str, against_eager: bool = True) -> str:
        reference = lambda other: getattr(other, name) if other else None
        return figure(getattr(row, name), reference(eager) if against_eager else None, reference(specialist))

    tokens = "-" if row.tokens is None else "yes" if row.first_mismatch is None else f"no, from {row.first_mismatch}"
    return [
        row.model,
        row.tool,
        row.backend,
        row.precision,
        cell("export_s", False),
        cell("export_peak_rss_mib", False),
        cell("artifact_mib"),
        cell("prefill_tok_s"),
        cell("decode_tok_s"),
        tokens,
        row.status[:120],
    ]


def report(rows: list[Row]) -> str:
    """The table: ratios to eager float32 on every row but eager's, and to the specialist on each hfexport row
    (the specialist's row is the one just below it)."""
    eager = {r.model: r for r in rows if r.tool == EAGER}
    body = []
    for i, r in enumerate(rows):
        below = rows[i + 1] if i + 1 < len(rows) else None
        specialist = below if r.tool == "hfexport" and below and below.tool not in ("hfexport", EAGER) else None
        body.append(cells(r, None if r.tool == EAGER else eager[r.model], specialist))
    headers = [
        "model",
        "tool",
        "backend",
        "precision",
        "export s",
        "peak RSS MiB",
        "artifact MiB",
        "prefill tok/s",
        "decode tok/s",
        "tokens = eager f32",
        "status",
    ]
    legend = (
        "x e: / eager float32 (artifact: / the float32 safetensors checkpoint); "
        "x s: / the specialist's row below (hfexport rows)"
    )
    return _common.table(headers, body) + "\n" + legend

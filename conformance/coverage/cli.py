"""``python -m conformance.coverage``: measure every registered architecture for one implementation, or
write the report from what both implementations' sweeps stored.

    python -m conformance.coverage [--impl hfexport|transformers] [--backends dynamo,onnx|all]
        [--scope all|types] [--only REGEX] [--limit N] [--jobs N] [--timeout S] [--budget MIN] [--fresh]
        [--no-generation] [--seed DIR]
        [--markdown out.md] [--report]

Cells already measured under the same versions are reused unless ``--fresh``. ``--seed DIR`` first takes
the cells of a committed sweep (``DIR/<impl>.json``) and its build verdicts (``DIR/builds.json``) that
``--out`` lacks: ``make coverage`` seeds the peer's cells from ``docs/reports/coverage`` (the peer is a
pinned release: its cells change only with the versions, and cells of other versions are measured again).
``--backends all`` adds ExecuTorch for a representative slice of architectures (``EXECUTORCH_SLICE``;
``--executorch-all`` for every one). ``--report`` alone writes ``out/coverage/report.md`` (and its chart)
from ``out/coverage/*.json``; after a sweep it writes it too.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from .build import BUILD_STAGES
from .enumerate import SCOPES, Architecture, architectures
from .runner import Task
from .store import DEFAULT_DIR, BuildVerdicts, Store, build_versions, cell_key, current_versions, source_revision

DEFAULT_BACKENDS = ("dynamo", "onnx")
# ExecuTorch lowering costs tens of seconds per graph on 2 cores: by default a dozen common architectures.
EXECUTORCH_SLICE = frozenset(
    {
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "MistralForCausalLM",
        "PhiForCausalLM",
        "GPT2LMHeadModel",
        "Gemma3ForCausalLM",
        "BertForMaskedLM",
        "DistilBertForSequenceClassification",
        "T5ForConditionalGeneration",
        "ViTForImageClassification",
        "WhisperForConditionalGeneration",
        "Wav2Vec2ForCTC",
    }
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.coverage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--impl", help="implementation under test: hfexport (default) or transformers")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS), help="comma list, or 'all'")
    parser.add_argument("--executorch-all", action="store_true", help="ExecuTorch for every architecture")
    parser.add_argument("--only", help="regex (case-insensitive) on class name, head or model type")
    parser.add_argument(
        "--scope", choices=SCOPES, default="all", help="all classes, or one per model type (its most specific head)"
    )
    parser.add_argument("--limit", type=int, help="the first N architectures (by name) after --only")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per cell (default 90)")
    parser.add_argument(
        "--budget", type=float, help="minutes: start no architecture after this; the rest waits for a resumed sweep"
    )
    parser.add_argument("--fresh", action="store_true", help="measure again cells stored for the same versions")
    parser.add_argument("--no-generation", action="store_true", help="skip export_for_generation and tokens")
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help="where the JSON results live")
    parser.add_argument(
        "--seed", type=Path, help="a folder of a committed sweep (<impl>.json, builds.json): its cells are reused"
    )
    parser.add_argument(
        "--markdown", type=Path, help="write the report here (default with --report: out/coverage/report.md)"
    )
    parser.add_argument("--report", action="store_true", help="write the report from the stored results")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def backends_for(arch: Architecture, backends: list[str], executorch_all: bool) -> list[str]:
    return [b for b in backends if b != "executorch" or executorch_all or arch.name in EXECUTORCH_SLICE]


def plan(
    archs: list[Architecture],
    backends: list[str],
    store: Store,
    versions: dict[str, Any],
    *,
    fresh: bool = False,
    executorch_all: bool = False,
    verdicts: BuildVerdicts | None = None,
) -> tuple[list[Task], int, list[tuple[Architecture, str, dict[str, Any]]]]:
    """The tasks still to measure (stored cells of the same versions are reused unless ``fresh``), how many
    cells are reused, and the cells of architectures a sweep already found not buildable under the same
    build versions (``verdicts``): recorded from that verdict, with no worker started for them."""
    tasks: list[Task] = []
    known: list[tuple[Architecture, str, dict[str, Any]]] = []
    reused = 0
    current_build = build_versions()
    for arch in archs:
        todo = []
        for backend in backends_for(arch, backends, executorch_all):
            if not fresh and store.reusable(cell_key(arch.name, arch.head, backend), versions):
                reused += 1
            else:
                todo.append(backend)
        verdict = verdicts.get(arch.name, arch.head, current_build) if verdicts is not None and not fresh else None
        if todo and verdict is not None:
            record = {"status": "not_buildable", "stage": verdict["stage"], "message": verdict["message"]}
            known += [(arch, b, {**record, "seconds": 0.0, "checks": {}, "build_verdict_reused": True}) for b in todo]
        elif todo:
            tasks.append(Task(arch, todo))
    return tasks, reused, known


def sweep(args: argparse.Namespace, command: str) -> dict[str, int]:
    from pytest_hfexport.adapters import resolve
    from pytest_hfexport.backends import select

    from .runner import Sweep

    impl = args.impl or "hfexport"
    backends = select(args.backends)
    adapter = resolve(impl)
    versions = current_versions(impl, adapter.version())
    revision = source_revision(getattr(getattr(adapter, "module", None), "__file__", None))
    store = Store(args.out / f"{impl}.json", impl)
    archs = architectures(args.only, args.limit, args.scope)
    verdicts = BuildVerdicts(args.out / "builds.json")
    if args.seed is not None:
        seeded = store.merge_seed(args.seed / f"{impl}.json", versions)
        verdicts_seeded = verdicts.merge_seed(args.seed / "builds.json")
        print(f"{impl}: seeded {seeded} cells and {verdicts_seeded} build verdicts from {args.seed}", file=sys.stderr)
    tasks, reused, known = plan(
        archs, backends, store, versions, fresh=args.fresh, executorch_all=args.executorch_all, verdicts=verdicts
    )
    total = sum(len(t.backends) for t in tasks) + len(known)
    counts = {"pass": 0, "fail": 0, "unsupported": 0, "not_buildable": 0}
    bar = _progress(total, impl, args.no_progress)
    last_save = time.monotonic()

    def on_record(arch: Architecture, backend: str, record: dict[str, Any]) -> None:
        nonlocal last_save
        record.update(
            arch=arch.name,
            head=arch.head,
            model_type=arch.model_type,
            config_class=arch.config_class,
            backend=backend,
            versions=versions,
            impl_revision=revision,
            measured=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )
        store.put(cell_key(arch.name, arch.head, backend), record)
        if record["status"] == "not_buildable" and record.get("stage") in BUILD_STAGES:
            verdicts.put(
                arch.name,
                arch.head,
                {"stage": record["stage"], "message": record["message"], "versions": build_versions()},
            )
        counts[record["status"]] = counts.get(record["status"], 0) + 1
        if bar is not None:
            bar.set_postfix(counts, refresh=False)
            bar.update(1)
        if time.monotonic() - last_save > 5:
            store.save()
            last_save = time.monotonic()

    started = time.time()
    runner = Sweep(
        impl,
        on_record,
        jobs=args.jobs,
        timeout=args.timeout,
        generation=not args.no_generation,
        logs=args.out / "logs" / impl,
        # ExecuTorch's lowering would add a minute to the warm-up for the dozen architectures that use it.
        warm_backends=[b for b in backends if b != "executorch"],
    )
    deadline = time.monotonic() + 60 * args.budget if args.budget else None
    left = 0
    try:
        for arch, backend, record in known:
            on_record(arch, backend, record)
        left = runner.run(tasks, deadline)
    finally:
        if bar is not None:
            bar.close()
        verdicts.save()
        measured = sum(counts.values())  # cells recorded; a budget can leave planned ones unmeasured
        store.data["runs"].append(
            {
                "command": command,
                "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
                "seconds": round(time.time() - started, 1),
                "architectures": len(archs),
                "measured": measured,
                "planned": total,
                "reused": reused,
                "build_verdicts_reused": len(known),
                "left_for_later": left,
                "jobs": args.jobs,
                "timeout": args.timeout,
                "versions": versions,
                "impl_revision": revision,
            }
        )
        store.save()
    print(
        f"{impl}: {len(archs)} architectures, {measured} of {total} planned cells measured, {reused} reused in "
        f"{time.time() - started:.0f} s: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + (f"; {left} architectures left for a resumed sweep (--budget)" if left else ""),
        file=sys.stderr,
    )
    return counts


def _progress(total: int, impl: str, disabled: bool) -> Any:
    if disabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"coverage {impl}", unit="cell", dynamic_ncols=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m conformance.coverage " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.impl or not (args.report or args.markdown):
        sweep(args, command.strip())
    if args.report or args.markdown:
        from .report import write_report

        path = write_report(args.out, args.markdown or Path("out/coverage/report.md"))
        print(f"report: {path}", file=sys.stderr)
    return 0

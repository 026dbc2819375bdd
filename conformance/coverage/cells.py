"""One cell: an architecture exported on one backend through an implementation's adapter, judged against eager.

``export``: the plain dynamic export from the batch-1 sample, saved and loaded back, run at the sample
and at batch 2 x another length, every output compared with eager (``pytest_hfexport.pipeline.Harness``,
the plugin's one measurement, and ``pytest_hfexport.compare``, its one comparison). ``generation``
(generative heads): ``export_for_generation``, each component saved and loaded, then 16 greedy tokens
of the model's own ``generate()`` with the components served by their artifacts
(``pytest_hfexport.serving``) where the adapter declares it lacks ``serve``, else through the adapter's
own ``serve``, against eager ``generate()``. A capability the adapter declares it lacks is
``unsupported``; any other exception is a failure with the stage it happened in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .build import Built, describe

NEW_TOKENS = 16
PASS, FAIL, UNSUPPORTED, NOT_BUILDABLE, SKIPPED = "pass", "fail", "unsupported", "not_buildable", "skipped"


def check(status: str, stage: str = "", message: str = "", seconds: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {"status": status, "stage": stage, "message": message, "seconds": round(seconds, 3), **extra}


def export_check(adapter: Any, backend: str, built: Built, workdir: Path) -> dict[str, Any]:
    from pytest_hfexport.adapters import Unsupported
    from pytest_hfexport.pipeline import ExportCheckError, Harness

    start = time.perf_counter()
    gap = adapter.declared_gap("export", backend)
    if gap is not None:
        return check(UNSUPPORTED, "export", gap)
    harness = Harness(adapter, backend, workdir=workdir / f"{backend}-export")
    try:
        measurement = harness.export_and_compare(built.model, built.sample, built.other)
    except Unsupported as exc:
        return check(UNSUPPORTED, "export", str(exc), time.perf_counter() - start)
    except ExportCheckError as exc:
        m = exc.measurement
        message = m.short_message() if m is not None else str(exc).splitlines()[0]
        # Whether the artifact matched eager at the sample it was traced on, before other inputs failed.
        sample_ok = m is not None and bool(m.results) and m.results[0].ok
        return check(
            FAIL,
            exc.stage,
            message,
            time.perf_counter() - start,
            max_abs=_finite(m.max_abs if m is not None else None),
            sample_ok=sample_ok,
        )
    return check(
        PASS,
        sample_ok=True,
        seconds=time.perf_counter() - start,
        max_abs=_finite(measurement.max_abs),
        export_seconds=round(measurement.seconds.get("export", 0.0), 3),
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and value == value and abs(value) != float("inf") else None


def generation_check(adapter: Any, backend: str, built: Built, workdir: Path) -> dict[str, Any]:
    from pytest_hfexport.reference import eager_tokens, generation_config
    from pytest_hfexport.serving import served_tokens

    start = time.perf_counter()
    for capability in ("export", "export_for_generation"):
        gap = adapter.declared_gap(capability, backend)
        if gap is not None:
            return check(UNSUPPORTED, capability, gap)
    model, inputs = built.model, built.sample
    try:
        expected = eager_tokens(model, inputs, NEW_TOKENS)
    except Exception as exc:  # eager generate() itself fails: nothing to judge the export against
        return check(NOT_BUILDABLE, "eager_generate", describe(exc), time.perf_counter() - start)
    stage = "export"
    try:
        exporter = adapter.exporter(backend)
        config = adapter.config(backend, dynamic=True)
        programs = adapter.export_for_generation(exporter, model, inputs, config)
        stage = "save"
        directory = workdir / f"{backend}-generation"
        directory.mkdir(parents=True, exist_ok=True)
        paths = {name: adapter.save(exporter, program, directory, name) for name, program in programs.items()}
        if adapter.declared_gap("serve", backend) is None:
            stage, how = "serve", ""
            got = adapter.serve(model, paths, inputs, NEW_TOKENS, generation_config(model, NEW_TOKENS))
        else:  # the judge's own serving: generate() with each component's forward replaced by its artifact
            stage, how = "load", "serve declared lacking: tokens from the judge's serving of the components"
            runners = {name: adapter.load(path) for name, path in paths.items()}
            stage = "tokens"
            got = served_tokens(model, runners, inputs, NEW_TOKENS)
        if got.tolist() != expected.tolist():
            return check(FAIL, stage, _first_difference(got, expected), time.perf_counter() - start)
    except Exception as exc:
        return check(FAIL, stage, describe(exc), time.perf_counter() - start)
    return check(PASS, seconds=time.perf_counter() - start, components=sorted(programs), note=how)


def _first_difference(got: Any, expected: Any) -> str:
    g, e = got.tolist(), expected.tolist()
    for row, (a, b) in enumerate(zip(g, e)):
        for position, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"greedy token {position} of row {row} is {x}, eager generate() gives {y}"
    return f"greedy tokens have shape {list(got.shape)}, eager generate() gives {list(expected.shape)}"


def summarise(checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The cell's status from its checks: unsupported when the plain export is; else the first failure
    (stage prefixed by its check when it is not the plain export); else pass."""
    export = checks["export"]
    if export["status"] == UNSUPPORTED:
        return {"status": UNSUPPORTED, "stage": export["stage"], "message": export["message"]}
    for name, result in checks.items():
        if result["status"] == FAIL:
            stage = result["stage"] if name == "export" else f"{name}:{result['stage']}"
            return {"status": FAIL, "stage": stage, "message": result["message"]}
    return {"status": PASS, "stage": "", "message": ""}


# Stages of the plain export after which no program exists: generation (the same tracing, split) is not tried.
NO_PROGRAM = frozenset({"eager", "export", "lowering"})


def run_cell(adapter: Any, built: Built, backend: str, workdir: Path, generation: bool = True) -> dict[str, Any]:
    """Every check of one cell: the plain export, then (generative heads) generation, unless the plain export
    produced no program at all or is unsupported."""
    checks = {"export": export_check(adapter, backend, built, workdir)}
    if built.arch.generative and generation:
        export = checks["export"]
        if export["status"] == PASS or (export["status"] == FAIL and export["stage"] not in NO_PROGRAM):
            checks["generation"] = generation_check(adapter, backend, built, workdir)
        else:
            checks["generation"] = check(SKIPPED, message="not run: the plain export produced no program")
    return {**summarise(checks), "checks": checks}

"""The two checks of one architecture on one backend, as test bodies: each returns on a match and raises
``CellFailure`` (an ``AssertionError`` that names the stage) otherwise.

``judge_export``: the plain dynamic export from the batch-1 sample, saved and loaded back, run at the sample
and at batch 2 x another length, every output compared with eager (``pytest_hfexport.pipeline.Harness``, the
plugin's one measurement, and ``pytest_hfexport.compare``, its one comparison). ``judge_generation``
(generative heads): ``export_for_generation``, each component saved and loaded, then 16 greedy tokens of the
model's own ``generate()`` with the components served by their artifacts (``pytest_hfexport.serving``) where
the adapter declares it lacks ``serve``, else through the adapter's own ``serve``, against eager
``generate()``. A capability the adapter declares it lacks raises the plugin's ``Unsupported`` (a skip the
report counts as ``unsupported``), as everywhere in the suite; nothing else is ever skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Built, NotBuildable, describe

NEW_TOKENS = 16
# Leads the failure message of an export that matched eager at its batch-1 sample before failing away from it,
# so the report (which reads the JSON rows) can show the sample verdict: the message comes first in the row.
SAMPLE_OK = "matched at the batch-1 sample; "


class CellFailure(AssertionError):
    """The export (or generation) does not serve what eager does; ``stage`` is where it failed, which the
    plugin's report row takes as its stage (the row's message is this exception's text)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


# The row's message is the exception as pytest prints it: the builtin's name reads as the other entries do.
CellFailure.__module__ = "builtins"
CellFailure.__qualname__ = CellFailure.__name__ = "AssertionError"


class CellTimeout(BaseException):
    """The cell ran past its time limit (raised by a signal alarm). A ``BaseException``, so that no ``except
    Exception`` on the way (the harness's, a library's fallback) turns it into another stage or swallows it;
    pytest reports it as a failure whose stage is ``timeout``."""

    stage = "timeout"


CellTimeout.__module__ = "builtins"


def judge_export(adapter: Any, backend: str, device: str, built: Built, workdir: Path, cache: Any = None) -> Any:
    """The plain dynamic export of ``built`` (with the plugin's artifact cache, unless None); returns the
    measurement on a match."""
    from pytest_hfexport.pipeline import ExportCheckError, Harness

    harness = Harness(adapter, backend, device, workdir, cache=cache)
    try:
        return harness.export_and_compare(built.model, built.sample, built.other)
    except ExportCheckError as exc:
        m = exc.measurement
        message = m.short_message() if m is not None else str(exc).splitlines()[0]
        # Whether the artifact matched eager at the sample it was traced on, before other inputs failed.
        sample_ok = m is not None and bool(m.results) and m.results[0].ok
        raise CellFailure(exc.stage, (SAMPLE_OK if sample_ok else "") + message) from None


def judge_generation(adapter: Any, backend: str, built: Built, workdir: Path, cache: Any = None) -> list[str]:
    """``export_for_generation`` of ``built`` serves eager ``generate()``'s greedy tokens; returns the component
    names. Eager ``generate()`` failing is the suite's limit (``NotBuildable``), not the implementation's."""
    from pytest_hfexport.reference import eager_tokens, generation_config
    from pytest_hfexport.serving import served_tokens

    adapter.require("export", backend)
    adapter.require("export_for_generation", backend)
    model, inputs = built.model, built.sample
    try:
        expected = eager_tokens(model, inputs, NEW_TOKENS)
    except Exception as exc:  # nothing to judge the export against
        raise NotBuildable("eager_generate", describe(exc)) from exc
    stage = "export"
    try:
        exporter = adapter.exporter(backend)
        config = adapter.config(backend, dynamic=True)
        names: list[str] = []

        def export_and_save(folder: Path) -> dict[str, Path]:
            programs = adapter.export_for_generation(exporter, model, inputs, config)
            names.extend(programs)
            return {name: adapter.save(exporter, program, folder, name) for name, program in programs.items()}

        if cache is None:
            directory = workdir / f"{backend}-generation"
            directory.mkdir(parents=True, exist_ok=True)
            paths = export_and_save(directory)
        else:
            from pytest_hfexport.artifact_cache import export_key

            key = export_key(adapter, backend, model, inputs, config, "export_for_generation", {})
            paths, _ = cache.get_or_build(key, export_and_save)
        stage = "save"
        if adapter.declared_gap("serve", backend) is None:
            stage = "serve"
            got = adapter.serve(model, paths, inputs, NEW_TOKENS, generation_config(model, NEW_TOKENS))
        else:  # the judge's own serving: generate() with each component's forward replaced by its artifact
            stage = "load"
            runners = {name: adapter.load(path) for name, path in paths.items()}
            stage = "tokens"
            got = served_tokens(model, runners, inputs, NEW_TOKENS)
    except Exception as exc:  # the plugin's Unsupported is a skip, not an Exception: it passes through
        raise CellFailure(stage, describe(exc)) from None
    if got.tolist() != expected.tolist():
        raise CellFailure(stage, first_difference(got, expected))
    return sorted(paths)


def first_difference(got: Any, expected: Any) -> str:
    g, e = got.tolist(), expected.tolist()
    for row, (a, b) in enumerate(zip(g, e)):
        for position, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"greedy token {position} of row {row} is {x}, eager generate() gives {y}"
    return f"greedy tokens have shape {list(got.shape)}, eager generate() gives {list(expected.shape)}"

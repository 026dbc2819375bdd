"""One measurement: eager -> export -> save -> load -> run -> compare, each stage kept apart.

``Harness.export_and_compare`` is what the fixtures call. A failure in a stage raises
``ExportCheckError`` whose ``stage`` is one of ``hfexport.errors.STAGES`` (eager, export,
lowering, save, load, run, mismatch); a mismatch raises ``ExportMismatch`` (an AssertionError)
naming the output, the shapes, the error and the tolerance. A mismatch always fails.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adapters import Adapter, Unsupported
from .compare import CompareResult, ToleranceSpec, compare
from .naming import flat_named

STAGES = ("eager", "export", "lowering", "save", "load", "run", "mismatch")


class ExportCheckError(Exception):
    """A stage of an export check failed; ``stage`` says which."""

    def __init__(self, message: str, stage: str, measurement: Measurement | None = None) -> None:
        super().__init__(f"[{stage}] {message}")
        self.stage = stage
        self.measurement = measurement


class ExportMismatch(ExportCheckError, AssertionError):
    """The exported program runs but its outputs differ from eager beyond tolerance."""


@dataclass
class Measurement:
    """The result object of ``export_and_compare``: per-input-set comparisons, stage, seconds."""

    model: str
    backend: str
    check: str = "export"
    implementation: str = ""
    device: str = "cpu"
    stage: str | None = None  # the failing stage; None when it passed
    message: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    results: list[CompareResult] = field(default_factory=list)
    program: Any = None  # the in-memory program of this export; None when the artifact came from the cache
    artifact: Path | None = None
    cached: bool = False  # the artifact was reused from the artifact cache (it was still run against eager)
    runner: Any = None  # the loaded artifact, to run more inputs through (not serialised)

    @property
    def ok(self) -> bool:
        return self.stage is None and all(r.ok for r in self.results)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def max_abs(self) -> float | None:
        return max((r.max_abs for r in self.results), default=None)

    @property
    def max_rel(self) -> float | None:
        return max((r.max_rel for r in self.results), default=None)

    @property
    def worst_output(self) -> str | None:
        worst = [r.worst for r in self.results if r.worst is not None]
        if not worst:
            return None
        return max(worst, key=lambda d: (not d.ok, d.ratio)).name

    def __getitem__(self, output: str):
        """``result["logits"]``: the OutputDiff of that output on the sample inputs."""
        return self.results[0].outputs[output]

    def summary(self) -> dict[str, Any]:
        """JSON-safe: what the report row takes from a measurement."""
        return {
            "model": self.model,
            "backend": self.backend,
            "check": self.check,
            "stage": self.stage,
            "ok": self.ok,
            "max_abs": _finite(self.max_abs),
            "max_rel": _finite(self.max_rel),
            "worst_output": self.worst_output,
            "seconds": round(self.total_seconds, 4),
            "message": self.short_message(),
        }

    def short_message(self) -> str:
        """One line: the first failing output for a mismatch, else the error's first line."""
        if self.stage == "mismatch":
            lines = [line for r in self.results for line in r.failures()]
            if lines:
                return lines[0][:300]
        return self.message.splitlines()[0][:300] if self.message else ""


def _finite(x: float | None) -> float | str | None:
    if x is None:
        return None
    return x if x == x and abs(x) != float("inf") else str(x)


def to_device(value: Any, device: str) -> Any:
    import torch

    if device == "cpu":
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def model_name(model: Any) -> str:
    return type(model).__name__


class Harness:
    """Runs measurements for one test: one implementation, one backend, one device."""

    def __init__(
        self,
        implementation: Adapter,
        backend: str,
        device: str = "cpu",
        workdir: Path | None = None,
        record: Callable[[Measurement], None] | None = None,
        tolerance: ToleranceSpec = None,
        cache: Any = None,
    ) -> None:
        self.implementation = implementation
        self.cache = cache  # an ArtifactCache, or None: export every time
        self.backend = backend
        self.device = device
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hfexport-"))
        self.record = record or (lambda m: None)
        self.tolerance = tolerance
        self._count = 0

    def config(self, **overrides: Any) -> Any:
        return self.implementation.config(self.backend, **overrides)

    def exporter(self) -> Any:
        return self.implementation.exporter(self.backend)

    def eager(self, model: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            return flat_named(model(**copy.deepcopy(dict(inputs))))

    def export_and_compare(
        self,
        model: Any,
        inputs: Mapping[str, Any],
        other_inputs: Any = None,
        *,
        tolerance: ToleranceSpec = None,
        output_tolerance: ToleranceSpec = None,
        check: str = "export",
        name: str | None = None,
        from_disk: bool = True,
        **config: Any,
    ) -> Measurement:
        """Export ``model`` on ``inputs``, run the artifact (from disk unless ``from_disk=False``) on
        ``inputs`` and on each of ``other_inputs`` (one dict or a list), compare with eager."""
        import torch

        others = (
            [] if other_inputs is None else [other_inputs] if isinstance(other_inputs, Mapping) else list(other_inputs)
        )
        if others and "dynamic" not in config and "dynamic_shapes" not in config:
            config["dynamic"] = True
        m = Measurement(name or model_name(model), self.backend, check, self.implementation.name, self.device)
        stage = "eager"
        clock = time.perf_counter()

        def lap(key: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            m.seconds[key] = m.seconds.get(key, 0.0) + now - clock
            clock = now

        try:
            model = to_device(model, self.device) if self.device != "cpu" else model
            sets = [("sample", to_device(dict(inputs), self.device))]
            sets += [
                (f"other{i}" if len(others) > 1 else "other", to_device(dict(o), self.device))
                for i, o in enumerate(others)
            ]
            expected = [self.eager(model, s) for _, s in sets]
            lap("eager")
            stage = "export"
            self.implementation.require("export", self.backend)
            exporter = self.exporter()
            export_config = self.config(**config)
            if from_disk and self.cache is not None:
                m.artifact = self._cached_export(m, exporter, model, dict(sets[0][1]), export_config, lap)
                stage = "load"
                runner = m.runner = self.implementation.load(m.artifact)
            elif from_disk:
                m.program = self.implementation.export(exporter, model, dict(sets[0][1]), export_config)
                lap("export")
                stage = "save"
                m.artifact = self.implementation.save(exporter, m.program, self.directory())
                lap("save")
                stage = "load"
                runner = m.runner = self.implementation.load(m.artifact)
            else:
                m.program = self.implementation.export(exporter, model, dict(sets[0][1]), export_config)
                lap("export")
                stage = "load"
                runner = m.runner = self.implementation.runner_for(m.program, self.backend)
            lap("load")
            for (label, feed), ref in zip(sets, expected):
                stage = "run"
                with torch.no_grad():
                    got = flat_named(runner(**copy.deepcopy(feed)))
                lap("run")
                stage = "mismatch"
                m.results.append(
                    compare(
                        ref,
                        got,
                        self.backend,
                        tolerance=_merge(self.tolerance, tolerance),
                        output_tolerance=output_tolerance,
                        label=label,
                    )
                )
        except Unsupported:
            raise
        except Exception as exc:
            m.stage = getattr(exc, "stage", None) if getattr(exc, "stage", None) in STAGES else stage
            m.message = f"{type(exc).__name__}: {exc}"
            lap(stage)
            self.record(m)
            raise ExportCheckError(f"{m.model} on {self.backend}: {m.message}", m.stage or stage, m) from exc
        failed = [r for r in m.results if not r.ok]
        if failed:
            m.stage = "mismatch"
            m.message = "\n".join(r.message() for r in failed)
            inputs = dict(sets)[failed[0].label]
            tol = _merge(self.tolerance, tolerance)
            found = self.locate(m, model, inputs, dict(sets[0][1]), exporter, export_config, tol)
            m.message += f"\n{found.describe()}"
        self.record(m)
        if failed:
            raise ExportMismatch(f"{m.model}: {m.message}", "mismatch", m)
        return m

    def locate(
        self,
        m: Measurement,
        model: Any,
        inputs: Mapping[str, Any],
        sample: dict[str, Any],
        exporter: Any,
        config: Any,
        tolerance: Any,
    ) -> Any:
        """After a mismatch: the first module whose output the artifact computes differently
        (``pytest_hfexport.localise``), from the saved file, or for ExecuTorch from the in-memory program
        (exported again when the artifact came from the cache)."""
        from .localise import Artifact, locate

        def program() -> Any:
            if m.program is None:
                m.program = self.implementation.export(exporter, model, sample, config)
            return m.program

        path = self.implementation.raw_artifact(m.artifact) if m.artifact is not None else None
        return locate(model, inputs, self.backend, Artifact(path, program), tolerance=tolerance)

    def directory(self) -> Path:
        """A fresh folder for one export's artifacts under this harness's work folder."""
        self._count += 1
        directory = self.workdir / f"{self.backend}-{self._count}"
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _cached_export(
        self, m: Measurement, exporter: Any, model: Any, inputs: dict, export_config: Any, lap: Callable[[str], None]
    ) -> Path:
        """The saved artifact of this export: from the artifact cache, else exported, saved and stored there."""
        from .artifact_cache import export_key

        key = export_key(self.implementation, self.backend, model, inputs, export_config)

        def build(directory: Path) -> dict[str, Path]:
            m.program = self.implementation.export(exporter, model, inputs, export_config)
            lap("export")
            try:
                path = self.implementation.save(exporter, m.program, directory)
            except Exception as exc:
                with contextlib.suppress(AttributeError, TypeError):
                    exc.stage = "save"  # type: ignore[attr-defined]  # read by export_and_compare's handler
                raise
            lap("save")
            return {"model": path}

        paths, m.cached = self.cache.get_or_build(key, build)
        if m.cached:
            lap("cache")  # the key and the lookup; on a miss they count as export time
        return paths["model"]


def _merge(base: ToleranceSpec, override: ToleranceSpec) -> Any:
    return override if override is not None else base

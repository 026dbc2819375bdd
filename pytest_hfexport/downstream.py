"""Downstream use: name your model factories, get the conformance-style checks on every backend.

    from pytest_hfexport import parametrize_with_checks, ModelCase

    @parametrize_with_checks([ModelCase("tiny", build=TinyModel.tiny, inputs=TinyModel.dummy_inputs)],
                             xfails={"tiny/executorch/shapes": "dynamic seq not lowered yet"})
    def test_exportable(check):
        check()

Each model x check becomes a test (id ``tiny-export``) and the plugin adds the backend axis
(``[tiny-export-onnx]``, ``-m onnx`` selects), binds ``check`` to the backend, the implementation
under test and the device, and records one report row per model x backend x check.

A model may be given as a ``ModelCase`` (the suite's ``conformance.zoo`` entries are ModelCases too, with the
checks of the suite families they opt into), or as a plain function returning ``(model, inputs)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from .compare import ToleranceSpec
from .generation_checks import GENERATION_CHECKS, default_checks

CHECK_ARGNAME = "check"


@dataclass
class ModelCase:
    """A model under test. ``inputs`` is a dict, or ``f(model, batch, seq) -> dict`` (then the ``export`` check
    also runs the artifact at ``other`` sizes, and ``shapes`` draws batch/seq inside the exported ranges)."""

    name: str
    build: Callable[[], Any]
    inputs: Callable[..., Mapping[str, Any]] | Mapping[str, Any]
    # None: by what the model is (``generation_checks.default_checks``: a generative head also gets the generation
    # families; the model is built once at collection to see); or names from CHECKS.
    checks: Sequence[str] | None = None
    sample: tuple[int, int] = (1, 6)
    other: tuple[int, int] = (2, 9)
    config: Mapping[str, Any] = field(default_factory=dict)  # export config overrides
    tolerance: ToleranceSpec = None  # one value for every output, or {output name or pattern: value}
    seed: int = 0
    cache_len: int = 64  # the static cache's length (``static_cache``)

    def selected_checks(self) -> tuple[str, ...]:
        """The checks this case gets when the caller names none: ``checks``, else by what the model is."""
        return tuple(self.checks) if self.checks else default_checks(self.model())

    def model(self) -> Any:
        import torch

        torch.manual_seed(self.seed)
        model = self.build()
        return model.eval() if hasattr(model, "eval") else model

    @property
    def sized(self) -> bool:
        return callable(self.inputs)

    def sample_inputs(self, model: Any, batch: int | None = None, seq: int | None = None) -> dict[str, Any]:
        if not callable(self.inputs):
            return copy.deepcopy(dict(self.inputs))
        import torch

        torch.manual_seed(self.seed + 1)
        return dict(
            self.inputs(model, self.sample[0] if batch is None else batch, self.sample[1] if seq is None else seq)
        )

    def other_inputs(self, model: Any) -> dict[str, Any] | None:
        return self.sample_inputs(model, *self.other) if self.sized else None


def as_case(obj: Any) -> ModelCase:
    if isinstance(obj, ModelCase):
        return obj
    if callable(obj):
        return _FactoryCase(getattr(obj, "__name__", type(obj).__name__), factory=obj)
    raise TypeError(
        f"parametrize_with_checks takes ModelCase objects (zoo entries are ModelCases) or factories, got {obj!r}"
    )


class _FactoryCase(ModelCase):
    """A ``() -> (model, inputs)`` function: fixed inputs, the ones built with the model."""

    def __init__(self, name: str, factory: Callable[[], tuple[Any, Mapping[str, Any]]]) -> None:
        self._factory = factory
        self._inputs: dict[int, Mapping[str, Any]] = {}
        super().__init__(name, build=self._build, inputs={})

    def _build(self) -> Any:
        model, inputs = self._factory()
        self._inputs[id(model)] = inputs
        return model

    @property
    def sized(self) -> bool:
        return False

    def sample_inputs(self, model: Any, batch: int | None = None, seq: int | None = None) -> dict[str, Any]:
        return copy.deepcopy(dict(self._inputs[id(model)]))


# -- the checks -------------------------------------------------------------------------------------


def check_export(case: ModelCase, harness: Any, settings: Any) -> Any:
    """Export on the sample, save, load from disk, run on the sample and away from it (the case's other sizes, or
    the sample resized to another batch and length), compare with eager."""
    from .strategies import away_from_sample

    model = case.model()
    sample = case.sample_inputs(model)
    other: Any = case.other_inputs(model)
    if other is None and dict(case.config).get("dynamic", True) and not dict(case.config).get("dynamic_shapes"):
        other = away_from_sample(sample)
    return harness.export_and_compare(
        model, sample, other, check="export", name=case.name, tolerance=case.tolerance, **dict(case.config)
    )


def check_shapes(case: ModelCase, harness: Any, settings: Any) -> Any:
    """Export once (dynamic), then run the saved artifact at hypothesis-drawn batch and sequence sizes. The
    sizes come from the case (its inputs maker, or the sample resized), never from the ranges the program
    declares: a program exported static under ``dynamic=True`` fails here."""
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings
    from hypothesis import strategies as st

    from . import strategies
    from .compare import compare

    model = case.model()
    sample = case.sample_inputs(model)
    config = {"dynamic": True, **dict(case.config)}
    m = harness.export_and_compare(model, sample, check="shapes", name=case.name, tolerance=case.tolerance, **config)
    max_examples = getattr(settings, "max_examples", None)

    @hsettings(
        max_examples=max_examples or hsettings().max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.data())
    def run(data: Any) -> None:
        drawn = data.draw(strategies.sizes(1, 3, 2, 12), label="sizes")
        batch, seq = drawn["batch"], drawn["seq"]
        if case.sized:
            inputs = case.sample_inputs(model, batch, seq)
        else:
            inputs = strategies.resize_like(sample, _resized_shapes(sample, batch, seq), seed=batch * 100 + seq)
        expected = harness.eager(model, inputs)
        got = strategies_flat(m.runner(**copy.deepcopy(inputs)))
        result = compare(expected, got, harness.backend, tolerance=case.tolerance, label=f"batch={batch} seq={seq}")
        m.results.append(result)
        if not result.ok:
            from .pipeline import ExportMismatch

            m.stage, m.message = "mismatch", result.message()
            raise ExportMismatch(f"{case.name}: {result.message()}", "mismatch", m)

    run()
    return m


def _resized_shapes(sample: Mapping[str, Any], batch: int, seq: int) -> dict[str, list[int]]:
    """The sample's tensor shapes with its batch (axis 0) and sequence (axis 1) sizes replaced."""
    import torch

    tensors = {k: v for k, v in sample.items() if isinstance(v, torch.Tensor)}
    sizes0 = {int(t.shape[0]) for t in tensors.values() if t.dim() >= 1}
    sizes1 = {int(t.shape[1]) for t in tensors.values() if t.dim() >= 2}
    b0 = sizes0.pop() if len(sizes0) == 1 else None
    s0 = sizes1.pop() if len(sizes1) == 1 else None
    return {
        k: [batch if i == 0 and d == b0 else seq if i == 1 and d == s0 else d for i, d in enumerate(t.shape)]
        for k, t in tensors.items()
    }


def strategies_flat(value: Any) -> dict[str, Any]:
    from .naming import flat_named

    return flat_named(value)


def check_unchanged(case: ModelCase, harness: Any, settings: Any) -> Any:
    """After an export (successful or not) the model, the inputs, torch's global state and every patchable
    attribute are as before (``pytest_hfexport.hygiene``), and eager outputs are bit-identical."""
    from .compare import compare
    from .hygiene import diff, snapshot
    from .pipeline import ExportCheckError, Measurement

    model = case.model()
    sample = case.sample_inputs(model)
    before_out = harness.eager(model, sample)
    before = snapshot(model, sample)
    m = Measurement(case.name, harness.backend, "unchanged", harness.implementation.name, harness.device)
    exporter = harness.exporter()
    failure = None
    try:
        harness.implementation.export(exporter, model, sample, harness.config(**dict(case.config)))
    except Exception as exc:  # a failed export must leave everything as it was too
        failure = f"{type(exc).__name__}: {exc}"
    problems = diff(before, model, sample)
    result = compare(before_out, harness.eager(model, sample), "dynamo", tolerance=0.0, label="eager after export")
    m.results.append(result)
    if not result.ok:
        problems.append("eager outputs differ after the export: " + "; ".join(result.failures()))
    if problems:
        m.stage = "export"
        m.message = (
            "the export changed the caller's world: "
            + "; ".join(problems[:10])
            + (f" (the export itself failed: {failure})" if failure else "")
        )
    harness.record(m)
    if problems:
        raise ExportCheckError(f"{case.name}: {m.message}", "export", m)
    return m


CHECKS: dict[str, Callable[[ModelCase, Any, Any], Any]] = {
    "export": check_export,
    "shapes": check_shapes,
    "unchanged": check_unchanged,
    **GENERATION_CHECKS,
}


@dataclass(frozen=True)
class CheckCase:
    """One model x check, before the backend is known (the parametrized value)."""

    case: ModelCase
    check: str

    @property
    def id(self) -> str:
        return f"{self.case.name}-{self.check}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this check was not bound to a backend: is the pytest_hfexport plugin active?")


@dataclass
class BoundCheck:
    """What the test receives as ``check``: call it to run the check on this backend."""

    case: ModelCase
    name: str
    harness: Any
    settings: Any = None

    @property
    def backend(self) -> str:
        return self.harness.backend

    def __call__(self) -> Any:
        __tracebackhide__ = True
        return CHECKS[self.name](self.case, self.harness, self.settings)

    def __repr__(self) -> str:
        return f"<check {self.case.name}/{self.backend}/{self.name}>"


def parametrize_with_checks(
    models: Sequence[Any],
    *,
    checks: Sequence[str] | None = None,
    xfails: Mapping[str, str | Mapping[str, str]] | None = None,
    argname: str = CHECK_ARGNAME,
) -> Callable:
    """Decorator: one test per model x check (x backend, added by the plugin).

    ``checks`` restricts the checks (default: each case's own, else what its model is: ``default_checks``).
    ``xfails`` maps ``model/backend/check`` (fnmatch patterns allowed) or a test id to a reason, or to
    ``{"reason": ..., "when": "transformers>=5.24"}`` for a failure of some releases only; they are strict xfails."""
    cases = [as_case(m) for m in models]
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"parametrize_with_checks: model names must be unique, got {names}")
    params = []
    for case in cases:
        for check in checks or case.selected_checks():
            if check not in CHECKS:
                raise ValueError(f"unknown check {check!r}; checks are {sorted(CHECKS)}")
            cc = CheckCase(case, check)
            params.append(pytest.param(cc, id=cc.id))
    from .xfails import normalise

    entries = normalise(dict(xfails), "parametrize_with_checks(xfails=...)") if xfails else {}

    def decorator(fn: Callable) -> Callable:
        fn = pytest.mark.parametrize(argname, params)(fn)
        fn = pytest.mark.usefixtures("hfexport_backend", "hfexport_harness")(fn)
        fn = pytest.mark.hfexport_checks(argname=argname, xfails=entries)(fn)
        return fn

    return decorator

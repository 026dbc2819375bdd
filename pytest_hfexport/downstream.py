"""Downstream use: name your model factories, get the conformance-style checks on every backend.

    from pytest_hfexport import parametrize_with_checks, ModelCase

    @parametrize_with_checks([ModelCase("tiny", build=TinyModel.tiny, inputs=TinyModel.dummy_inputs)],
                             xfails={"tiny/executorch/shapes": "dynamic seq not lowered yet"})
    def test_exportable(check):
        check()

Each model x check becomes a test (id ``tiny-export``) and the plugin adds the backend axis
(``[tiny-export-onnx]``, ``-m onnx`` selects), binds ``check`` to the backend, the implementation
under test and the device, and records one report row per model x backend x check.

A model may be given as a ``ModelCase``; as an object shaped like a ``conformance.zoo`` entry
(``name``, ``model()``, ``sample_inputs(model, batch=None, seq=None)``); or as a plain function
returning ``(model, inputs)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pytest

from .compare import ToleranceSpec

CHECK_ARGNAME = "check"


@dataclass
class ModelCase:
    """A model under test. ``inputs`` is a dict, or ``f(model, batch, seq) -> dict`` (then the ``export`` check
    also runs the artifact at ``other`` sizes, and ``shapes`` draws batch/seq inside the exported ranges)."""

    name: str
    build: Callable[[], Any]
    inputs: Callable[..., Mapping[str, Any]] | Mapping[str, Any]
    checks: Sequence[str] = ("export", "shapes", "unchanged")
    sample: tuple[int, int] = (1, 6)
    other: tuple[int, int] = (2, 9)
    config: Mapping[str, Any] = field(default_factory=dict)  # export config overrides
    tolerance: ToleranceSpec = None  # one value for every output, or {output name or pattern: value}
    seed: int = 0

    def model(self) -> Any:
        import torch

        torch.manual_seed(self.seed)
        model = self.build()
        return model.eval() if hasattr(model, "eval") else model

    @property
    def sized(self) -> bool:
        return callable(self.inputs)

    def sample_inputs(self, model: Any, batch: int | None = None, seq: int | None = None) -> dict[str, Any]:
        if not self.sized:
            return copy.deepcopy(dict(self.inputs))
        import torch

        torch.manual_seed(self.seed + 1)
        return dict(self.inputs(model, self.sample[0] if batch is None else batch,
                                self.sample[1] if seq is None else seq))

    def other_inputs(self, model: Any) -> dict[str, Any] | None:
        return self.sample_inputs(model, *self.other) if self.sized else None


def as_case(obj: Any) -> ModelCase:
    if isinstance(obj, ModelCase):
        return obj
    if hasattr(obj, "name") and hasattr(obj, "model") and hasattr(obj, "sample_inputs"):  # a zoo entry
        entry = obj
        return ModelCase(entry.name, build=lambda: entry.model(),
                         inputs=lambda model, b, s: entry.sample_inputs(model, b, s),
                         sample=tuple(getattr(entry, "sample", (1, 6))), other=tuple(getattr(entry, "other", (2, 9))))
    if callable(obj):
        return _FactoryCase(getattr(obj, "__name__", type(obj).__name__), factory=obj)
    raise TypeError(f"parametrize_with_checks takes ModelCase objects, zoo entries or factories, got {obj!r}")


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
    """Export on the sample, save, load from disk, run on the sample (and the other sizes), compare with eager."""
    model = case.model()
    sample = case.sample_inputs(model)
    other = case.other_inputs(model)
    return harness.export_and_compare(model, sample, other, check="export", name=case.name,
                                      tolerance=case.tolerance, **dict(case.config))


def check_shapes(case: ModelCase, harness: Any, settings: Any) -> Any:
    """Export once (dynamic), then run the saved artifact on hypothesis-drawn shapes inside its declared ranges."""
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings
    from hypothesis import strategies as st

    from . import strategies
    from .compare import compare

    model = case.model()
    sample = case.sample_inputs(model)
    config = {"dynamic": True, **dict(case.config)}
    m = harness.export_and_compare(model, sample, check="shapes", name=case.name, tolerance=case.tolerance, **config)
    ep = strategies.exported_program_of(m.program)
    if ep is not None and not (ep.example_inputs and strategies.input_axes(m.program)):
        ep = None  # e.g. an ExecuTorch edge program: no example inputs to name its axes
    if ep is not None:
        drawn = strategies.runtime_shapes(m.program)
    elif case.sized:  # the backend's program hides the ExportedProgram: draw plain sizes for the inputs maker
        drawn = strategies.sizes(1, 3, 1, 12)
    else:
        from .implementations import Unsupported

        raise Unsupported(f"{harness.implementation.name}/{harness.backend}: the program declares no shape ranges "
                          f"and {case.name} has no inputs maker f(model, batch, seq) to build other shapes")
    max_examples = getattr(settings, "max_examples", None)

    @hsettings(max_examples=max_examples or hsettings().max_examples, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.data())
    def run(data: Any) -> None:
        shapes = data.draw(drawn, label="shapes")
        if ep is None or case.sized:
            if ep is not None:
                first = next(iter(shapes.values()))
                batch, seq = first[0], first[1] if len(first) > 1 else case.sample[1]
            else:
                batch, seq = shapes["batch"], shapes["seq"]
            inputs = case.sample_inputs(model, batch, seq)
        else:
            inputs = strategies.resize_like(sample, shapes, seed=data.draw(st.integers(0, 2**16), label="seed"))
        expected = harness.eager(model, inputs)
        got = m.runner(copy.deepcopy(inputs))
        result = compare(expected, got, harness.backend, tolerance=case.tolerance,
                         label="x".join(str(s) for s in next(iter(shapes.values()))) if ep is not None else "drawn")
        m.results.append(result)
        if not result.ok:
            from .pipeline import ExportMismatch

            m.stage, m.message = "mismatch", result.message()
            raise ExportMismatch(f"{case.name}: {result.message()}", "mismatch", m)

    run()
    return m


def check_unchanged(case: ModelCase, harness: Any, settings: Any) -> Any:
    """After an export the model is as before: same parameters and buffers, same forward, same mode, same output."""
    import torch

    from .pipeline import ExportCheckError, Measurement

    model = case.model()
    sample = case.sample_inputs(model)
    before_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    before_attrs = dict(vars(model))
    before_out = harness.eager(model, sample)
    training = model.training
    m = Measurement(case.name, harness.backend, "unchanged", harness.implementation.name, harness.device)
    exporter = harness.exporter()
    try:
        harness.implementation.export(exporter, model, sample, harness.config(**dict(case.config)))
    except Exception as exc:
        m.stage, m.message = getattr(exc, "stage", "export"), f"{type(exc).__name__}: {exc}"
        harness.record(m)
        raise ExportCheckError(m.message, m.stage or "export", m) from exc
    problems = []
    after_state = model.state_dict()
    if set(after_state) != set(before_state):
        problems.append(f"state_dict keys changed: {sorted(set(after_state) ^ set(before_state))[:5]}")
    problems += [f"{k} changed" for k, v in before_state.items() if k in after_state and not torch.equal(v, after_state[k])][:5]
    added = sorted(set(vars(model)) - set(before_attrs))
    if added:
        problems.append(f"attributes left on the model: {added}")
    if "forward" in vars(model) and vars(model)["forward"] is not before_attrs.get("forward"):
        problems.append("model.forward is still replaced")
    if model.training != training:
        problems.append(f"model.training changed to {model.training}")
    from .compare import compare

    result = compare(before_out, harness.eager(model, sample), "dynamo", tolerance=0.0, label="eager after export")
    m.results.append(result)
    if not result.ok:
        problems.append("eager outputs differ after the export: " + "; ".join(result.failures()))
    if problems:
        m.stage, m.message = "export", "the export changed the model: " + "; ".join(problems)
    harness.record(m)
    if problems:
        raise ExportCheckError(f"{case.name}: {m.message}", "export", m)
    return m


CHECKS: dict[str, Callable[[ModelCase, Any, Any], Any]] = {
    "export": check_export,
    "shapes": check_shapes,
    "unchanged": check_unchanged,
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


def parametrize_with_checks(models: Sequence[Any], *, checks: Sequence[str] | None = None,
                            xfails: Mapping[str, str] | None = None, argname: str = CHECK_ARGNAME) -> Callable:
    """Decorator: one test per model x check (x backend, added by the plugin).

    ``checks`` restricts the checks (default: each case's own, all of ``CHECKS`` by default). ``xfails`` maps
    ``model/backend/check`` (fnmatch patterns allowed) or a test id to a reason; they are strict xfails."""
    cases = [as_case(m) for m in models]
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"parametrize_with_checks: model names must be unique, got {names}")
    params = []
    for case in cases:
        for check in (checks or case.checks):
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

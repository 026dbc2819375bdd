"""Eager vs exported: per-output errors against per-dtype, per-backend tolerances.

An output passes when ``max|exported - eager| <= atol + rtol * max|eager|``. The relative
error reported is ``max|exported - eager| / max|eager|`` (error against the output's scale,
stable where single elements are near zero). Integer and bool outputs must match exactly, and an
output whose kind of dtype (bool, integer, floating point, complex) differs from eager's fails by
name, whatever its values; a floating-point or complex output must also have eager's exact dtype.
Outputs the exported side has and eager lacks are listed in ``extra``: informational unless
``strict_names=True``. Tolerances: ``default_tolerance(backend, dtype)``, overridden per model (one value)
and per output (a dict of output names or ``fnmatch`` patterns).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .backends import DECLARED_TOLERANCES


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float = 0.0

    def __str__(self) -> str:
        return f"atol={self.atol:.2g}" + (f" rtol={self.rtol:.2g}" if self.rtol else "")


# float32 tolerance per backend, from measurement: ten times the worst error over the zoo's default tier on the
# pinned stack (``python -m conformance.tolerances out/compat/pinned.json``; docs/plugin.md, "Tolerances").
# atol covers outputs whose eager values lie within [-1, 1] (their largest abs error), rtol larger outputs
# against their scale max|eager| (their largest rel error): T5's activations near 70 and Mamba's logits near
# 10 set the relative parts. Other dtypes scale from them.
FP32_ATOL = {"dynamo": 1.8e-6, "onnx": 4.8e-6, "executorch": 1.2e-5}
FP32_RTOL = {"dynamo": 2.6e-5, "onnx": 1.7e-4, "executorch": 1.8e-4}
DTYPE_ATOL = {"float16": 1e-2, "half": 1e-2, "bfloat16": 5e-2}


def default_tolerance(backend: str, dtype: Any) -> Tolerance:
    """Integers and bools: exact. fp32/fp64: the backend's bar plus its ``FP32_RTOL`` of the output's scale.
    fp16/bf16: the looser of the backend's bar and the dtype's."""
    name = str(dtype).replace("torch.", "")
    if name == "bool" or name.startswith(("int", "uint")):
        return Tolerance(0.0)
    declared = DECLARED_TOLERANCES.get(backend)
    base = FP32_ATOL.get(backend, declared[0] if declared else max(FP32_ATOL.values()))
    if name in ("float16", "bfloat16", "half"):
        return Tolerance(max(base, DTYPE_ATOL.get(name, 1e-2)))
    return Tolerance(base, FP32_RTOL.get(backend, declared[1] if declared else max(FP32_RTOL.values())))


ToleranceSpec = None | float | Tolerance | Mapping[str, float | Tolerance]


# Kinds whose exact dtype is part of the contract: a float32 output returned as float64 or float16 fails.
EXACT_DTYPE_KINDS = ("floating", "complex")


def dtype_kind(dtype: Any) -> str:
    """``bool``, ``integer``, ``floating`` or ``complex``: the kinds an exported output must keep."""
    name = str(dtype).replace("torch.", "")
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint")):
        return "integer"
    if name.startswith("complex"):
        return "complex"
    return "floating"


def _as_tolerance(value: float | Tolerance) -> Tolerance:
    return value if isinstance(value, Tolerance) else Tolerance(float(value))


def tolerance_for(name: str, backend: str, dtype: Any, *specs: ToleranceSpec) -> Tolerance:
    """Later specs win: default < model-wide value < per-output entry (exact name, then pattern)."""
    tol = default_tolerance(backend, dtype)
    for spec in specs:
        if spec is None:
            continue
        if isinstance(spec, Mapping):
            if name in spec:
                tol = _as_tolerance(spec[name])
            else:
                for pattern, value in spec.items():
                    if fnmatch.fnmatchcase(name, pattern):
                        tol = _as_tolerance(value)
                        break
        else:
            tol = _as_tolerance(spec)
    return tol


@dataclass
class OutputDiff:
    name: str
    shape: tuple
    expected_shape: tuple
    dtype: str
    max_abs: float
    max_rel: float
    tolerance: Tolerance
    ok: bool
    note: str = ""
    scale: float = 0.0  # max|eager|: the scale the relative part of the tolerance applies to

    @property
    def allowed(self) -> float:
        """The largest absolute error this output may have: ``atol + rtol * scale``."""
        return self.tolerance.atol + self.tolerance.rtol * self.scale

    @property
    def ratio(self) -> float:
        """Error over what is allowed: below 1 passes; how close a passing output runs to its tolerance."""
        if self.max_abs == 0:
            return 0.0
        return self.max_abs / self.allowed if self.allowed > 0 else float("inf")

    def describe(self) -> str:
        if self.note:
            return f"output {self.name!r}: {self.note}"
        return (
            f"output {self.name!r} shape {self.shape} {self.dtype}: max abs error {self.max_abs:.3e}, "
            f"max rel error {self.max_rel:.3e}, tolerance {self.tolerance}"
        )


@dataclass
class CompareResult:
    """Per output: errors, shapes, dtype, tolerance; plus where and how long."""

    backend: str
    label: str = "sample"
    outputs: dict[str, OutputDiff] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    # Exported outputs eager does not have: reported, a failure only when compared with strict_names=True.
    extra: list[str] = field(default_factory=list)
    strict_names: bool = False

    @property
    def ok(self) -> bool:
        return not self.missing and not (self.strict_names and self.extra) and all(d.ok for d in self.outputs.values())

    @property
    def worst(self) -> OutputDiff | None:
        """The output furthest past (or closest to) its tolerance."""
        if not self.outputs:
            return None
        return max(self.outputs.values(), key=lambda d: (not d.ok, d.ratio))

    @property
    def max_abs_small_scale(self) -> float:
        """The largest absolute error among outputs whose eager values stay within [-1, 1]: what the absolute part
        of a tolerance has to cover (larger outputs are covered by the relative part)."""
        return max((d.max_abs for d in self.outputs.values() if d.scale <= SMALL_SCALE), default=0.0)

    @property
    def max_rel_large_scale(self) -> float:
        """The largest relative error among outputs with values beyond [-1, 1]: what the relative part of a
        tolerance has to cover."""
        return max((d.max_rel for d in self.outputs.values() if d.scale > SMALL_SCALE), default=0.0)

    def measured(self) -> dict[str, Any]:
        """JSON-safe, for the report row: the errors of this comparison and the tolerance of its worst output."""
        worst = self.worst
        return {
            "label": self.label,
            "ok": self.ok,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "max_abs_small_scale": self.max_abs_small_scale,
            "max_rel_large_scale": self.max_rel_large_scale,
            "ratio": worst.ratio if worst is not None else None,
            "worst_output": worst.name if worst is not None else None,
            "tolerance": str(worst.tolerance) if worst is not None else None,
        }

    @property
    def max_abs(self) -> float:
        return max((d.max_abs for d in self.outputs.values()), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((d.max_rel for d in self.outputs.values()), default=0.0)

    def failures(self) -> list[str]:
        lines = [f"output {m!r} is missing from the exported program's outputs" for m in self.missing]
        if self.strict_names:
            lines += [f"output {e!r} is in the exported program's outputs but not in eager's" for e in self.extra]
        lines += [d.describe() for d in self.outputs.values() if not d.ok]
        return lines

    def message(self) -> str:
        head = f"{self.backend} export does not match eager PyTorch ({self.label} inputs):"
        return "\n  ".join([head, *self.failures()])

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "label": self.label,
            "missing": list(self.missing),
            "extra": list(self.extra),
            "outputs": {k: {**asdict(v), "tolerance": asdict(v.tolerance)} for k, v in self.outputs.items()},
        }


# Outputs whose eager values stay within [-1, 1] measure the absolute part of a tolerance (``max_abs_small_scale``).
SMALL_SCALE = 1.0

_OBSERVERS: contextvars.ContextVar[tuple[Callable[[CompareResult], None], ...]] = contextvars.ContextVar(
    "hfexport_compare_observers", default=()
)


@contextlib.contextmanager
def observing(callback: Callable[[CompareResult], None]) -> Iterator[None]:
    """Call ``callback`` with every ``CompareResult`` that ``compare`` gives inside the block (this thread and
    context): how the plugin puts every verdict's errors, passes included, on the test's report row."""
    token = _OBSERVERS.set((*_OBSERVERS.get(), callback))
    try:
        yield
    finally:
        _OBSERVERS.reset(token)


@contextlib.contextmanager
def unobserved() -> Iterator[None]:
    """Comparisons inside the block tell no observer: the locator's module-by-module comparisons explain a
    verdict and are not verdicts of their own."""
    token = _OBSERVERS.set(())
    try:
        yield
    finally:
        _OBSERVERS.reset(token)


def compare(
    expected: Mapping[str, Any],
    got: Mapping[str, Any],
    backend: str,
    *,
    tolerance: ToleranceSpec = None,
    output_tolerance: ToleranceSpec = None,
    label: str = "sample",
    strict_names: bool = False,
) -> CompareResult:
    """Compare flat named eager outputs with flat named exported outputs.

    Exported outputs eager lacks are listed in ``result.extra``; they fail the comparison only with
    ``strict_names=True``."""
    import torch

    result = CompareResult(backend, label, strict_names=strict_names)
    result.extra = [name for name in got if name not in expected]
    for name, ref in expected.items():
        if name not in got:
            result.missing.append(name)
            continue
        out = got[name]
        out = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
        ref_t = ref if isinstance(ref, torch.Tensor) else torch.as_tensor(ref)
        tol = tolerance_for(name, backend, ref_t.dtype, tolerance, output_tolerance)
        diff = OutputDiff(
            name, tuple(out.shape), tuple(ref_t.shape), str(ref_t.dtype).replace("torch.", ""), 0.0, 0.0, tol, True
        )
        if tuple(out.shape) != tuple(ref_t.shape):
            diff.ok, diff.note = False, f"shape {tuple(out.shape)} != eager {tuple(ref_t.shape)}"
            diff.max_abs = diff.max_rel = float("inf")
        elif ref_t.numel():
            r, o = ref_t.detach().cpu().double(), out.detach().cpu().double()
            finite_mismatch = bool((torch.isfinite(r) != torch.isfinite(o)).any())
            delta = torch.where(torch.isfinite(r) & torch.isfinite(o), (r - o).abs(), torch.zeros_like(r))
            diff.max_abs = float(delta.max())
            scale = float(r[torch.isfinite(r)].abs().max()) if bool(torch.isfinite(r).any()) else 0.0
            diff.max_rel = diff.max_abs / scale if scale > 0 else (0.0 if diff.max_abs == 0 else float("inf"))
            diff.scale = scale
            diff.ok = not finite_mismatch and diff.max_abs <= tol.atol + tol.rtol * scale
            if finite_mismatch:
                diff.note = f"non-finite values differ from eager (nan/inf), dtype {diff.dtype}"
        differs = dtype_kind(out.dtype) != dtype_kind(ref_t.dtype) or (
            dtype_kind(ref_t.dtype) in EXACT_DTYPE_KINDS and out.dtype != ref_t.dtype
        )
        if diff.note == "" and differs:
            # An integer where eager gives floats (or bool where eager gives ints) is a different output, and so
            # is float64 (twice the memory) or float16 (less precision) where eager gives float32, even where
            # the values happen to agree.
            diff.ok = False
            diff.note = (
                f"dtype {str(out.dtype).replace('torch.', '')} ({dtype_kind(out.dtype)}) != eager "
                f"{diff.dtype} ({dtype_kind(ref_t.dtype)})"
            )
        result.outputs[name] = diff
    for observer in _OBSERVERS.get():
        observer(result)
    return result

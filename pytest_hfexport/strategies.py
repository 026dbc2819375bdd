"""Hypothesis strategies for export tests: sizes, Dim specs, token inputs, runtime shapes.

- ``sizes()``: one batch and one sequence length shared by every input of a draw;
- ``dim_specs(sample_inputs)``: explicit ``Dim(name, min=, max=)`` specs whose ranges contain the sample;
- ``token_inputs(config, batch, seq)``: token ids inside the vocabulary and a left-padded mask;
- ``runtime_shapes(program)`` / ``runtime_inputs(program, sample_inputs)``: sizes drawn inside an
  exported program's declared ranges (``ExportedProgram.range_constraints``): export once, run many shapes.

Profiles: ``hfexport-ci`` (derandomized, no deadline, few examples, no database) and ``hfexport-dev``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

CI_PROFILE, DEV_PROFILE = "hfexport-ci", "hfexport-dev"
settings.register_profile(
    CI_PROFILE,
    max_examples=5,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    DEV_PROFILE,
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def sizes(min_batch: int = 1, max_batch: int = 4, min_seq: int = 1, max_seq: int = 16) -> st.SearchStrategy:
    """``{"batch": b, "seq": s}``: draw once, build every input of a call from the same sizes."""
    return st.fixed_dictionaries({"batch": st.integers(min_batch, max_batch), "seq": st.integers(min_seq, max_seq)})


@st.composite
def dim_specs(
    draw, sample_inputs: Mapping[str, Any], axes: Mapping[str, int] | None = None, max_size: int = 64
) -> dict[str, Any]:
    """``dynamic_shapes`` for ``torch.export``: one named Dim per axis name (default batch=0, seq=1), shared by
    every tensor input that has that axis, with ``min <= sample size <= max``. Inputs with inconsistent sizes
    on an axis keep it static."""
    import torch
    from torch.export import Dim

    axes = dict(axes or {"batch": 0, "seq": 1})
    tensors = {k: v for k, v in sample_inputs.items() if isinstance(v, torch.Tensor)}
    dims: dict[str, Any] = {}
    for axis_name, axis in axes.items():
        sizes_seen = {int(t.shape[axis]) for t in tensors.values() if t.dim() > axis}
        if len(sizes_seen) != 1:
            continue
        (size,) = sizes_seen
        lo = draw(st.integers(1, size))
        floor = max(size, lo + 1)  # torch.export.Dim needs min < max
        hi = draw(st.integers(floor, floor + max_size))
        dims[axis_name] = (axis, Dim(axis_name, min=lo, max=hi))
    spec: dict[str, Any] = {}
    for name, t in tensors.items():
        spec[name] = {axis: dim for axis, dim in dims.values() if t.dim() > axis}
    for name, _v in sample_inputs.items():
        spec.setdefault(name, None)
    return spec


def token_inputs(
    config: Any,
    batch: int | st.SearchStrategy | None = None,
    seq: int | st.SearchStrategy | None = None,
    *,
    mask: bool = True,
    token_type_ids: bool = False,
) -> st.SearchStrategy:
    """``input_ids`` in ``[0, vocab_size)`` (of ``config.get_text_config()``), ``attention_mask`` left-padded with
    at least one real token per row; ``batch``/``seq`` fixed ints or strategies (default ``sizes()``)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(text.vocab_size)
    b_st = batch if isinstance(batch, st.SearchStrategy) else st.just(batch) if batch is not None else st.integers(1, 3)
    s_st = seq if isinstance(seq, st.SearchStrategy) else st.just(seq) if seq is not None else st.integers(1, 12)

    @st.composite
    def build(draw):
        import torch

        b, s = draw(b_st), draw(s_st)
        ids = draw(st.lists(st.integers(0, vocab - 1), min_size=b * s, max_size=b * s))
        out = {"input_ids": torch.tensor(ids, dtype=torch.long).reshape(b, s)}
        if mask:
            pads = draw(st.lists(st.integers(0, s - 1), min_size=b, max_size=b))
            am = torch.ones(b, s, dtype=torch.long)
            for row, pad in enumerate(pads):
                am[row, :pad] = 0
            out["attention_mask"] = am
        if token_type_ids:
            out["token_type_ids"] = torch.zeros(b, s, dtype=torch.long)
        return out

    return build()


# -- shapes declared by an exported program --------------------------------------------------------


def exported_program_of(program: Any) -> Any:
    """The ``torch.export.ExportedProgram`` behind a backend's program (ONNX, ExecuTorch) or None."""
    import torch

    if isinstance(program, torch.export.ExportedProgram):
        return program
    ep = getattr(program, "exported_program", None)  # torch.onnx.ONNXProgram attribute, ExecuTorch method
    if callable(ep):
        try:
            ep = ep()
        except Exception:
            ep = None
    return ep if isinstance(ep, torch.export.ExportedProgram) else None


def input_axes(program: Any) -> dict[str, list[Any]]:
    """Flat input name -> per-axis size: an int (static) or a sympy expression over the program's symbols.
    Names are ``hfexport.outputs.flatten_named`` names of the program's example inputs."""
    import torch

    from .naming import flat_named as flatten_named

    ep = exported_program_of(program)
    if ep is None:
        raise TypeError(f"{type(program).__name__} carries no ExportedProgram to read shapes from")
    names = list(flatten_named(ep.example_inputs[1]).keys()) if ep.example_inputs else []
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = [
        placeholders[s.arg.name]
        for s in ep.graph_signature.input_specs
        if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name") and s.arg.name in placeholders
    ]
    out: dict[str, list[Any]] = {}
    for name, node in zip(names, user):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        out[name] = [d.node.expr if isinstance(d, torch.SymInt) else int(d) for d in val.shape]
    return out


def declared_ranges(program: Any, cap: int = 16) -> dict[Any, tuple[int, int]]:
    """Free symbol -> (lo, hi) from ``range_constraints``, clamped to ``[1, cap]`` for tests."""
    ep = exported_program_of(program)
    out: dict[Any, tuple[int, int]] = {}
    symbols = set()
    for axes in input_axes(program).values():
        for d in axes:
            if not isinstance(d, int):
                symbols |= set(d.free_symbols)
    for sym in symbols:
        vr = ep.range_constraints.get(sym)
        lo = int(vr.lower) if vr is not None and math.isfinite(float(vr.lower)) else 1
        hi = int(vr.upper) if vr is not None and math.isfinite(float(vr.upper)) else cap
        lo, hi = max(lo, 1), min(hi, cap)
        out[sym] = (lo, max(lo, hi))
    return out


def tied_symbols(program: Any) -> dict[Any, tuple]:
    """Symbol -> its tie key ``(axis index, size in the example inputs)``. ``Dim.AUTO`` gives every input its own
    symbols (``input_ids`` and ``attention_mask`` do not share a sequence symbol in the graph), yet the model needs
    them equal; symbols on the same axis index with the same example size are drawn together."""
    from .naming import flat_named as flatten_named

    ep = exported_program_of(program)
    example = flatten_named(ep.example_inputs[1]) if ep.example_inputs else {}
    ties: dict[Any, tuple] = {}
    for name, axes in input_axes(program).items():
        for i, d in enumerate(axes):
            if not isinstance(d, int) and d.is_Symbol and name in example:
                ties.setdefault(d, (i, int(example[name].shape[i])))
    return ties


@st.composite
def runtime_shapes(draw, program: Any, cap: int = 16, tie: bool = True) -> dict[str, list[int]]:
    """Flat input name -> concrete shape, every symbol drawn inside its declared range. With ``tie`` (default),
    sizes that were equal on the same axis in the example inputs stay equal (one batch, one sequence length)."""
    ranges = declared_ranges(program, cap)
    ties = tied_symbols(program) if tie else {}
    groups: dict[Any, list[Any]] = {}
    for sym in sorted(ranges, key=str):
        groups.setdefault(ties.get(sym, sym), []).append(sym)
    values = {}
    for key, syms in sorted(groups.items(), key=lambda kv: str(kv[0])):
        lo = max(ranges[s][0] for s in syms)
        hi = min(ranges[s][1] for s in syms)
        value = draw(st.integers(lo, max(lo, hi)), label=str(key))
        values.update({s: value for s in syms})
    shapes = {}
    for name, axes in input_axes(program).items():
        shapes[name] = [d if isinstance(d, int) else int(d.subs(values)) for d in axes]
    if any(s < 0 for shape in shapes.values() for s in shape):
        from hypothesis import assume

        assume(False)
    return shapes


def resize_like(sample_inputs: Mapping[str, Any], shapes: Mapping[str, list[int]], seed: int = 0) -> dict[str, Any]:
    """New inputs with the given shapes and contents like the sample's: token ids within the sample's range,
    masks all ones but left-padded on the first row, floats from a normal distribution."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for name, value in sample_inputs.items():
        if not isinstance(value, torch.Tensor):
            if name in shapes:
                raise TypeError(f"input {name!r} is a {type(value).__name__}; resize_like handles tensor inputs only")
            out[name] = value
            continue
        shape = list(shapes.get(name, value.shape))
        if value.dtype == torch.bool:
            out[name] = torch.ones(shape, dtype=torch.bool)
        elif not value.dtype.is_floating_point:
            if "mask" in name:
                t = torch.ones(shape, dtype=value.dtype)
                if len(shape) == 2 and shape[0] > 1 and shape[1] > 2:
                    t[0, :1] = 0
            else:
                lo, hi = (int(value.min()), int(value.max())) if value.numel() else (0, 1)
                t = torch.randint(lo, hi + 1, shape, generator=g, dtype=value.dtype)
            out[name] = t
        else:
            out[name] = torch.randn(shape, generator=g, dtype=value.dtype)
    return out


def runtime_inputs(program: Any, sample_inputs: Mapping[str, Any], cap: int = 16) -> st.SearchStrategy:
    """Inputs like ``sample_inputs`` at shapes drawn inside ``program``'s declared ranges."""
    return st.builds(resize_like, st.just(dict(sample_inputs)), runtime_shapes(program, cap), st.integers(0, 2**16))


def away_from_sample(
    sample_inputs: Mapping[str, Any], extra_batch: int = 1, extra_seq: int = 3
) -> list[dict[str, Any]]:
    """Inputs like the sample's at another batch and at another sequence length (axis 0 and axis 1 of the tensors
    that share the sample's sizes there): a program exported static under ``dynamic=True`` refuses them."""
    import torch

    tensors = [v for v in sample_inputs.values() if isinstance(v, torch.Tensor)]
    batch = {int(t.shape[0]) for t in tensors if t.dim() >= 1}
    seq = {int(t.shape[1]) for t in tensors if t.dim() >= 2}
    out = []
    for axis, sizes, extra in ((0, batch, extra_batch), (1, seq, extra_seq)):
        if len(sizes) != 1:
            continue
        (size,) = sizes
        shapes = {
            name: [s + extra if i == axis and s == size else s for i, s in enumerate(t.shape)]
            for name, t in sample_inputs.items()
            if isinstance(t, torch.Tensor)
        }
        out.append(resize_like(sample_inputs, shapes, seed=axis))
    return out

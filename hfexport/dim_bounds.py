"""Upper bounds for a program's dynamic axes, which ExecuTorch's memory planner needs.

ExecuTorch plans memory for the largest shape a program accepts; an axis left unbounded (``Dim.AUTO`` leaves
every upper bound open) would be planned at the sample size, and a longer input then fails at run time
("resize a bounded tensor"). Explicit ``Dim(min, max)`` are kept. Also: which symbols are batch axes, which
size a static cache (fixed at export), and which axes of each input are dynamic (recorded for the runner).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from . import caches
from .errors import HfExportError
from .outputs import flatten_named
from .shapes import BATCH_AXES

logger = logging.getLogger("hfexport.executorch")

# The sequence bound of an axis that has none; ExecutorchExporter(max_length=...) overrides it.
DEFAULT_MAX_LENGTH = 2048
# State-space models have no position limit, and the export-time closed-form scan
# (patching.ssm) holds a [batch, L, L, state, channels] tensor: the memory plan for L = 2048
# does not fit in memory at load. Their default sequence bound per call is this; longer prompts
# are fed in blocks through the multi-token decode graph, or pass max_length= explicitly.
DEFAULT_SSM_MAX_LENGTH = 64
# Attention models whose config names no position limit (t5's relative positions): at 2048 tokens t5's
# attention scores alone planned 4.6 GB, which every load of the program allocates. T5 was trained at 512.
DEFAULT_UNLIMITED_MAX_LENGTH = 512
# Config attributes that limit the token positions, first found wins (whisper names its decoder's
# limit max_target_positions; gpt2's n_positions is mapped to max_position_embeddings).
POSITION_LIMITS = ("max_position_embeddings", "n_positions", "max_target_positions")


def bound_dynamic_dims(
    program: torch.export.ExportedProgram,
    graph_inputs: Mapping[str, Any],
    model: Any,
    max_batch: int,
    max_length: int,
) -> dict[str, list[int]]:
    """Give every unbounded symbol an upper bound, in place; returns {symbol: [min, max]} of all symbols.

    Batch axes get ``max_batch``; other axes ``max_length``, lowered to the model's position limit
    (``POSITION_LIMITS``) where it is smaller; a model with no position limit left at the default length gets
    ``DEFAULT_SSM_MAX_LENGTH`` (state-space) or ``DEFAULT_UNLIMITED_MAX_LENGTH``; a static cache's slots keep
    the sample's size."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges

    max_length = sequence_bound(model, max_length)
    slots = static_cache_slots(graph_inputs)
    if slots is not None and slots < max_length:
        # A decoder's static-cache graph never takes more tokens than its cache has slots: planned at max_length
        # (2048), SmolLM2-135M's logits alone were 8 x 2048 x 49152 floats, and the program failed to load.
        max_length = slots
    batch_symbols = batch_symbols_of(program)
    patch_symbols = batch_symbols_of(program, patches=True) - batch_symbols
    cache_symbols = static_cache_symbols(program, graph_inputs) - batch_symbols
    shape_env = None
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        fake_mode = getattr(val, "fake_mode", None) if isinstance(val, torch.Tensor) else None
        if fake_mode is not None:
            shape_env = fake_mode.shape_env
            break
    bounds: dict[str, list[int]] = {}
    capped: list[str] = []
    for sym, vr in list(program.range_constraints.items()):
        lower = int(vr.lower) if vr.lower != -int_oo else 0
        if vr.upper == int_oo:
            if sym in cache_symbols:  # a static cache's slots (and heads, head size) are fixed at export
                cap = max(lower, sample_size(program, sym))
            else:
                cap = max_batch if sym in batch_symbols else max_length
                if sym in patch_symbols:  # flattened image patches: max_batch images of the sample's size
                    cap = max_batch * max(1, sample_size(program, sym))
                cap = max(cap, lower, sample_size(program, sym))
            new = ValueRanges(vr.lower, cap)
            program._range_constraints[sym] = new
            if shape_env is not None and sym in shape_env.var_to_range:
                shape_env.var_to_range[sym] = new
            kind = " (batch)" if sym in batch_symbols else " (static cache)" if sym in cache_symbols else ""
            kind = " (image patches)" if sym in patch_symbols else kind
            capped.append(f"{sym}<={cap}{kind}")
            bounds[str(sym)] = [lower, cap]
        else:
            bounds[str(sym)] = [lower, int(vr.upper)]
    if capped:
        logger.info(
            "ExecuTorch plans memory for the largest accepted shapes: unbounded dynamic axes get "
            "max_batch=%d / max_length=%d: %s (pass explicit Dim(min, max) or "
            "ExecutorchExporter(max_batch=, max_length=) to change)",
            max_batch,
            max_length,
            ", ".join(capped),
        )
    return bounds


def sequence_bound(model: Any, max_length: int) -> int:
    """The upper bound of a non-batch axis of ``model``'s inputs, given the exporter's ``max_length``."""
    config = getattr(model, "config", None)
    text_config = getattr(config, "get_text_config", lambda: None)()
    limits = [getattr(text_config, name, None) for name in POSITION_LIMITS]
    positions = next((n for n in limits if isinstance(n, int) and n >= 2), None)
    if positions is not None:
        return min(positions, max_length)
    if config is not None and max_length == DEFAULT_MAX_LENGTH:
        ssm = getattr(text_config, "state_size", None)
        return DEFAULT_SSM_MAX_LENGTH if ssm else DEFAULT_UNLIMITED_MAX_LENGTH
    return max_length


def static_cache_slots(graph_inputs: Mapping[str, Any]) -> int | None:
    """The slot count of a decoder-only call's StaticCache (its ``max_cache_len``), None where there is none or
    the call is an encoder-decoder's (its encoder's axes are not bounded by the decoder's cache)."""
    from transformers import StaticCache

    lengths = [
        int(getattr(layer, "max_cache_len", 0) or 0)  # a prefill's cache has no tensors before its first update
        for value in graph_inputs.values()
        if isinstance(value, StaticCache)
        for layer in getattr(value, "layers", [])
    ]
    lengths = [n for n in lengths if n > 0]
    encoder = any(caches.is_cache(v) and not isinstance(v, StaticCache) for v in graph_inputs.values())
    return int(max(lengths)) if lengths and not encoder and not any("encoder" in k for k in graph_inputs) else None


def dynamic_axes(program: torch.export.ExportedProgram, input_names: list[str]) -> dict[str, list[int]]:
    """{flat input name: [dynamic axes]}: the runner checks the static axes exactly, the others by bound."""
    user = [
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")
    ]
    if len(user) != len(input_names):
        return {}
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    out = {}
    for placeholder, name in zip(user, input_names):
        val = nodes[placeholder].meta.get("val")
        if isinstance(val, torch.Tensor):
            out[name] = [i for i, d in enumerate(val.shape) if isinstance(d, torch.SymInt)]
    return out


def batch_symbols_of(program: torch.export.ExportedProgram, patches: bool = False) -> set[Any]:
    """Symbols that size the batch axis of a 2D+ user input: axis 0, or where ``shapes.BATCH_AXES`` says.
    ``patches``: instead, axis 0 of the inputs that have no batch axis (flattened image patches)."""
    user = {
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")
    }
    out: set[Any] = set()
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dim() >= 2:
            axis = BATCH_AXES.get(node.name, {}).get(val.dim(), 0)
            if (axis is None) != patches:
                continue
            axis = axis or 0
            d = val.shape[axis]
            if isinstance(d, torch.SymInt) and d.node.expr.is_symbol:
                out.add(d.node.expr)
    return out


def static_cache_symbols(program: torch.export.ExportedProgram, graph_inputs: Mapping[str, Any]) -> set[Any]:
    """Symbols that size a non-batch axis of a StaticCache tensor (a layer's slots, heads, head size).

    A static cache's length is the ``max_cache_len`` chosen at export, and a program's metadata reports the
    planned (upper-bound) size of every dynamic axis: a caller that allocates the cache from the metadata, as
    the guide's loop does, must get exactly that length (capped at ``max_length`` instead, the cache and the
    mask over its slots disagree and XNNPACK refuses the shapes: "Propagating input shapes failed").
    The cross-attention cache of an encoder-decoder model is sized by the encoder input and keeps its bound.
    """
    from transformers import StaticCache

    fixed_ids: set[int] = set()
    for value in graph_inputs.values():
        if not caches.is_cache(value):
            continue
        parts = [value, getattr(value, "self_attention_cache", None)]
        for part in parts:
            if isinstance(part, StaticCache):
                fixed_ids.update(id(t) for t in caches.cache_tensors(part) if isinstance(t, torch.Tensor))
    if not fixed_ids:
        return set()
    flat = flatten_named(graph_inputs)
    user = [
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")
    ]
    if len(user) != len(flat):
        return set()
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    out: set[Any] = set()
    for placeholder, tensor in zip(user, flat.values()):
        val = nodes[placeholder].meta.get("val")
        if id(tensor) not in fixed_ids or not isinstance(val, torch.Tensor):
            continue
        for d in val.shape[1:]:
            if isinstance(d, torch.SymInt) and d.node.expr.is_symbol:
                out.add(d.node.expr)
    return out


def sample_size(program: torch.export.ExportedProgram, sym: Any) -> int:
    """The sample's size on a symbol (its hint), so a cap never excludes the traced shape."""
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            for d in val.shape:
                if isinstance(d, torch.SymInt) and d.node.expr == sym:
                    hint = d.node.hint
                    return int(hint) if hint is not None else 0
    return 0


# Above this, a program's memory plan (allocated in full by every load) gets a warning.
PLANNED_MEMORY_WARNING_BYTES = 1 << 30


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the platform does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        return None


def check_planned_memory(manager: Any, max_batch: int, max_length: int, limit: int | None = None) -> int | None:
    """The bytes every load of the program allocates for its activations (logged; a warning above 1 GiB).

    Above ``limit`` (default: this machine's physical memory) the export is refused: such a program cannot load
    here (the runtime fails with error 0x21, MemoryAllocationFailed), and the plan is set by the bounds, which
    the caller can lower. SmolLM2-135M at the default bounds (batch 8, 2048 tokens) planned about 17 GiB."""
    try:
        planned = sum(sum(plan.non_const_buffer_sizes) for plan in manager.executorch_program.execution_plan)
    except AttributeError:  # pragma: no cover - introspection only
        return None
    limit = physical_memory() if limit is None else limit
    if limit is not None and planned > limit:
        raise HfExportError(
            f"ExecuTorch plans {planned / 2**30:.1f} GiB of activations for the largest shapes this program accepts "
            f"(exporter bounds max_batch={max_batch}, max_length={max_length}, the latter lowered to the model's "
            "position limit or cache slots where smaller), allocated in full by every load, and this "
            f"machine has {limit / 2**30:.1f} GiB: the program could not load. Export with smaller bounds: "
            "ExecutorchExporter(max_batch=..., max_length=...), explicit Dim(min, max) in the config, or a static "
            "cache (generation_config max_cache_len bounds the tokens per call).",
            stage="lowering",
        )
    log = logger.warning if planned > PLANNED_MEMORY_WARNING_BYTES else logger.info
    log(
        "ExecuTorch plans %.1f MiB of activations for the largest accepted shapes (allocated on every load); "
        "smaller ExecutorchExporter(max_batch=, max_length=) or explicit Dim(max=) bounds shrink it",
        planned / 2**20,
    )
    return planned

"""Dynamic shapes: specs that mirror the inputs, and the tracing mode that keeps size-1 axes symbolic.

torch.export specialises an axis whose sample size is 0 or 1 (a batch-1 prompt
pins batch to 1, a one-token decode pins the query axis). ``symbolic_size_one``
traces size-obliviously instead, so Dim.AUTO on such an axis stays a symbol.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import Dim

logger = logging.getLogger(__name__)

_LOGGED_AUTO_HINT = False

_BUILTIN_CONTAINERS = (dict, list, tuple)


def _children(value: Any) -> list[Any] | None:
    """One level of a registered pytree node (cache, ModelOutput...), or None for a leaf."""
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is None or type(value) in _BUILTIN_CONTAINERS:
        return None
    children, _ = node.flatten_fn(value)
    return list(children)


def map_shapes(value: Any, tensor_fn) -> Any:
    """Build a dynamic_shapes spec shaped like ``value``: tensor_fn(tensor) at each tensor, None elsewhere."""
    if isinstance(value, torch.Tensor):
        return tensor_fn(value)
    if type(value) is dict:
        return {k: map_shapes(v, tensor_fn) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [map_shapes(v, tensor_fn) for v in value]
    children = _children(value)
    if children is not None:
        return [map_shapes(c, tensor_fn) for c in children]
    return None


def auto_dynamic_shapes(inputs: dict[str, Any]) -> dict[str, Any]:
    """Dim.AUTO on every axis of every tensor and cache input (what ``dynamic=True`` means)."""
    global _LOGGED_AUTO_HINT
    if not _LOGGED_AUTO_HINT:
        logger.info(
            "dynamic=True marks every axis Dim.AUTO; explicit dynamic_shapes on only the axes that vary "
            "(batch, sequence, cache length) export faster"
        )
        _LOGGED_AUTO_HINT = True
    return {
        name: map_shapes(value, _auto_axes(name, top_level=True))
        if isinstance(value, torch.Tensor)
        else map_shapes(value, _auto_axes(name, top_level=False))
        for name, value in inputs.items()
    }


# The query (token) axis of the usual generation inputs, by input name (negative: from the end;
# 4D masks are [batch, heads, query, keys]).
QUERY_AXES: dict[str, dict[int, int]] = {
    "input_ids": {2: 1},
    "decoder_input_ids": {2: 1},
    "token_type_ids": {2: 1},
    "mm_token_type_ids": {2: 1},
    "inputs_embeds": {3: 1},
    "decoder_inputs_embeds": {3: 1},
    "position_ids": {2: 1, 3: 2},
    "decoder_position_ids": {2: 1},
    "attention_mask": {4: 2},
    "decoder_attention_mask": {4: 2},
    "cache_position": {1: 0},
}


# The batch axis where it is not axis 0, by input name and rank (None: the input has none): M-RoPE
# position ids are [rope sections, batch, query] (qwen2-vl's language model); qwen2-vl's pixel values are
# the flattened patches of every image, [patches, features], sized like a sequence, not a batch.
BATCH_AXES: dict[str, dict[int, int | None]] = {
    "position_ids": {3: 1},
    "pixel_values": {2: None},
    "pixel_values_videos": {2: None},
}


def _auto_axes(name: str, top_level: bool):
    """Dim.AUTO on every axis, except size-1 axes that are neither batch nor query axes.

    Size-1 axes are traced size-obliviously (so a batch-1 or one-token sample stays dynamic);
    a size-1 broadcast axis (a mask's head axis) must stay static or the trace breaks, which is
    what Dim.AUTO would have decided for it anyway.
    """

    def axes(t: torch.Tensor) -> dict[int, Any] | None:
        query = QUERY_AXES.get(name, {}).get(t.dim()) if top_level else None
        batch = BATCH_AXES.get(name, {}).get(t.dim(), 0) if top_level else 0
        spec = {a: Dim.AUTO for a in range(t.dim()) if t.shape[a] != 1 or a in (batch, query)}
        return spec or None

    return axes


@contextlib.contextmanager
def symbolic_size_one(enabled: bool = True) -> Iterator[None]:
    """Trace size-obliviously so sample axes of size 1 stay symbolic instead of being pinned."""
    if not enabled:
        yield
        return
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]  # set at import
        yield


# Top-level token inputs whose batch axis is one and the same batch: the graph cannot prove it
# (gpt2 reshapes the mask with ``attention_mask.view(input_ids_batch, -1)``), and a separate symbol per
# input leaves a ``(mask_batch * mask_len) // batch`` axis whose size ExecuTorch's memory planner can
# only bound by the sample (a padded batch then fails to run once the mask outgrows it).
TIED_BATCH_INPUTS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "token_type_ids",
    "inputs_embeds",
    "decoder_input_ids",
    "decoder_attention_mask",
    "decoder_position_ids",
    "decoder_inputs_embeds",
)


# The name of the one Dim ``tie_batch_axes`` puts on the token inputs' batch axes (torch's errors name it).
TIED_BATCH = "batch"


def tie_batch_axes(spec: dict[str, Any], inputs: dict[str, Any], minimum: int | None = None) -> dict[str, Any]:
    """``spec`` (from ``auto_dynamic_shapes``) with one named ``batch`` Dim on the batch axis of every
    ``TIED_BATCH_INPUTS`` tensor whose sample batch equals ``input_ids``' (or the first such input's); ``minimum``
    its lower bound (a trace from batch 2 takes 2: a ``batch != 1`` guard then narrows nothing)."""
    tensors = {n: inputs[n] for n in TIED_BATCH_INPUTS if isinstance(inputs.get(n), torch.Tensor)}
    axes = {n: BATCH_AXES.get(n, {}).get(t.dim(), 0) for n, t in tensors.items() if t.dim() >= 2}
    axes = {n: a for n, a in axes.items() if a is not None and isinstance(spec.get(n), dict) and a in spec[n]}
    if len(axes) < 2:
        return spec
    first = next(iter(axes))
    size = tensors[first].shape[axes[first]]
    batch = Dim(TIED_BATCH) if minimum is None else Dim(TIED_BATCH, min=minimum)
    out = dict(spec)
    for name, axis in axes.items():
        if tensors[name].shape[axis] == size:
            out[name] = {**spec[name], axis: batch}
    return out


def static_batch_axes(spec: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (from ``auto_dynamic_shapes``) without a Dim on the batch axis of any ``TIED_BATCH_INPUTS`` tensor:
    those axes keep the sample's size."""
    out = dict(spec)
    for name in TIED_BATCH_INPUTS:
        tensor, axes = inputs.get(name), spec.get(name)
        if not isinstance(tensor, torch.Tensor) or not isinstance(axes, dict):
            continue
        axis = BATCH_AXES.get(name, {}).get(tensor.dim(), 0)
        if axis is not None and axis in axes:
            kept = {a: d for a, d in axes.items() if a != axis}
            out[name] = kept or None
    return out


def tied_batch_inputs(spec: Any) -> list[str]:
    """The inputs on which ``spec`` has ``tie_batch_axes``' named ``batch`` Dim."""
    if not isinstance(spec, dict):
        return []
    return sorted(
        name
        for name, axes in spec.items()
        if isinstance(axes, dict) and any(getattr(d, "__name__", None) == TIED_BATCH for d in axes.values())
    )


def ties_batch(spec: Any) -> bool:
    """Whether ``spec`` has ``tie_batch_axes``' named ``batch`` Dim on some axis."""
    return bool(tied_batch_inputs(spec))


def pins_tied_batch(error: BaseException, spec: Any) -> bool:
    """Whether ``error`` is torch.export refusing ``spec``'s tied batch Dim: the trace specialised it ('Constraints
    violated (batch)'), as a model that branches on a batch of 1 makes any batch-1 trace do."""
    return f"Constraints violated ({TIED_BATCH})" in str(error) and ties_batch(spec)


def widen_batch(inputs: Mapping[str, Any], batch: int = 2) -> dict[str, Any]:
    """Repeat every tensor whose leading (batch) axis has size 1, ``batch`` times along it.

    Every row is the same example, so generate() makes the same choices per row; images, audio
    features and grids repeat with their token rows, so placeholders and features still agree. Inputs
    with no batch axis (qwen2-vl's flattened patches of every image, ``BATCH_AXES``) repeat whole,
    so the patches of the repeated images follow their repeated grid rows.
    """

    def widened(name: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or not value.dim():
            return value
        patches = BATCH_AXES.get(name, {}).get(value.dim(), 0) is None
        return value.repeat(batch, *[1] * (value.dim() - 1)) if patches or value.shape[0] == 1 else value

    return {k: widened(k, v) for k, v in inputs.items()}

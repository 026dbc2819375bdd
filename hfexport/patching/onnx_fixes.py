"""ONNX-only workarounds: torch patches, custom onnxscript translations and ONNX IR post-fixes.

The ONNX exporter runs four kinds of workaround, each kept in a registry with a
one-line reason (which upstream bug, and how to tell the workaround can go):

- torch patches during tracing: ``register_patch("onnx", ...)`` (shared registry);
- FX node fixes after the ONNX decompositions: ``register_fx_node_fix("onnx")``;
- custom translations of torch ops that torchlib cannot translate:
  ``register_onnx_translation(op)`` (here);
- ONNX IR post-fixes run on the converted model before it is returned:
  ``register_onnx_ir_fix()`` (here).

Importing this module registers the built-in ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import _reason_of, register_fx_node_fix, register_fx_program_fix

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Translation:
    target: Any  # a torch OpOverload, or a dotted path resolved lazily ("torch.ops.ns.op.default")
    fn: Callable
    reason: str
    min_opset: int = 0  # the translation emits ops of this opset; below it torch's own translation stays


@dataclass(frozen=True)
class IrFix:
    fn: Callable
    reason: str


ONNX_TRANSLATIONS: list[Translation] = []
ONNX_IR_FIXES: list[IrFix] = []


def register_onnx_translation(target: Any, reason: str | None = None, min_opset: int = 0) -> Callable:
    """Register ``fn(*args, **kwargs)`` (onnxscript ops on onnx_ir values) as the ONNX form of a torch op.

    ``target`` is an OpOverload or its dotted name (``"torch.ops.transformers.grouped_mm_fallback.default"``),
    so an op whose library is not loaded here is simply skipped.
    """

    def decorator(fn: Callable) -> Callable:
        ONNX_TRANSLATIONS.append(Translation(target, fn, _reason_of(fn, reason), min_opset))
        return fn

    return decorator


def register_onnx_ir_fix(reason: str | None = None) -> Callable:
    """Register ``fix(model: onnx_ir.Model) -> bool`` (True when it changed the model), run after conversion."""

    def decorator(fn: Callable) -> Callable:
        ONNX_IR_FIXES.append(IrFix(fn, _reason_of(fn, reason)))
        return fn

    return decorator


def swap_in(graph: Any, node: Any, replacements: list[Any], removed: tuple[Any, ...] = ()) -> None:
    """Put ``replacements`` (the last one computes ``node``'s output, under its name, shape and type) in the place
    of ``node``, then remove ``node`` and the ``removed`` nodes that only fed it: an IR fix's one way to rewrite."""
    import onnx_ir as ir

    old, new = node.outputs[0], replacements[-1].outputs[0]
    new.shape, new.type = old.shape, old.type
    graph.insert_before(node, replacements)
    graph.outputs[:] = [new if v is old else v for v in graph.outputs]  # first: onnx_ir refuses to move an output
    ir.convenience.replace_all_uses_with(old, new)
    graph.remove([node, *removed], safe=True)
    new.name = old.name


def _resolve_op(target: Any) -> Any:
    if not isinstance(target, str):
        return target
    import torch

    obj: Any = torch
    parts = target.split(".")
    if parts[0] == "torch":
        parts = parts[1:]
    try:
        for part in parts:
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError):
        return None
    return obj


def translation_table(opset: int | None = None) -> dict[Any, Callable]:
    """{OpOverload: translation} for every registered translation whose op exists in this process
    (and, given ``opset``, whose ``min_opset`` it meets)."""
    table = {}
    for entry in ONNX_TRANSLATIONS:
        if opset is not None and opset < entry.min_opset:
            continue
        op = _resolve_op(entry.target)
        if op is None:
            logger.debug("custom translation target %s not present here; skipped", entry.target)
            continue
        table[op] = entry.fn
    return table


def apply_onnx_ir_fixes(model: Any) -> list[str]:
    """Run every IR post-fix; returns the reasons of those that changed the model (for logs)."""
    applied = []
    for fix in ONNX_IR_FIXES:
        if fix.fn(model):
            applied.append(fix.reason)
            logger.debug("ONNX IR fix applied: %s", fix.reason)
    return applied


# -- built-in workarounds ----------------------------------------------------------------------------


_LAYOUT_OPS = ("aten.transpose.int", "aten.permute.default", "aten.expand.default", "aten.t.default")
_RESHAPES = ("aten.reshape.default", "aten.view.default")
# The fixes of a training-IR program that torch.onnx's decompositions then retrace: the ONNX exporter's way for a
# model its one-pass trace refuses (``OnnxExporter.tracer``).
TWO_PASS = "onnx-two-pass"


@register_fx_program_fix(
    TWO_PASS,
    reason="the ONNX decompositions re-trace reshape(transpose(x)) size-obliviously and turn it into an invalid "
    "aten.view ('Cannot view a tensor ... strides', T5 attention output); a contiguous clone in between makes the "
    "view valid and lowers to nothing in ONNX. Only the two-pass way retraces; remove when T5 exports that way "
    "with dynamic=True without it.",
)
def _contiguous_before_reshape_of_layout_change(program: Any) -> None:
    import torch

    graph = program.graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or str(node.target) not in _RESHAPES:
            continue
        source = node.args[0]
        if getattr(source, "op", None) != "call_function" or str(source.target) not in _LAYOUT_OPS:
            continue
        with graph.inserting_before(node):
            clone = graph.call_function(
                torch.ops.aten.clone.default, (source,), {"memory_format": torch.contiguous_format}
            )
        if "val" in source.meta:
            clone.meta["val"] = source.meta["val"].clone(memory_format=torch.contiguous_format)
        node.replace_input_with(source, clone)
        changed = True
    if changed:
        graph.lint()
        program.graph_module.recompile()


def _sizes_of(graph: Any, tensor: Any) -> list[Any]:
    """One ``aten.sym_size.int`` node per axis of ``tensor`` (a node with a ``val``): its shape, symbolic or not."""
    import torch

    sizes = []
    for axis, size in enumerate(tensor.meta["val"].shape):
        node = graph.call_function(torch.ops.aten.sym_size.int, (tensor, axis))
        node.meta["val"] = size
        sizes.append(node)
    return sizes


@register_fx_node_fix(
    "onnx",
    when="onnxscript<0.7",
    reason="onnxscript 0.6's aten_masked_scatter expands the mask only when its rank is lower than self's, so a "
    "same-rank broadcast mask ((1, S, 1) against (1, S, D): the image placeholders of llava and qwen2_vl) scatters "
    "a subset of the positions and the logits differ silently (pytorch/pytorch#186146; onnxscript 0.7 expands both "
    "ways). Expand the mask to self's shape first.",
)
def _masked_scatter_with_a_full_mask(graph_module: Any, node: Any) -> bool:
    import torch

    if node.op != "call_function" or node.target is not torch.ops.aten.masked_scatter.default:
        return False
    self, mask = node.args[0], node.args[1]
    self_val, mask_val = self.meta.get("val"), mask.meta.get("val")
    if self_val is None or mask_val is None or tuple(mask_val.shape) == tuple(self_val.shape):
        return False
    graph = graph_module.graph
    with graph.inserting_before(node):
        full = graph.call_function(torch.ops.aten.expand.default, (mask, _sizes_of(graph, self)))
    full.meta["val"] = mask_val.expand(self_val.shape)
    node.replace_input_with(mask, full)
    return True


@register_fx_node_fix(
    "onnx",
    when="onnxscript<0.7",
    reason="onnxscript 0.6's aten_slice_scatter unsqueezes start and end even when they are None (an Unsqueeze "
    "with no input: constant folding fails on funnel with 'Bitwidth not available for ONNX data type: STRING', "
    "and without folding the model is invalid); onnxscript 0.7 defaults them. Pass 0 and the axis size.",
)
def _slice_scatter_with_explicit_bounds(graph_module: Any, node: Any) -> bool:
    import torch

    if node.op != "call_function" or node.target is not torch.ops.aten.slice_scatter.default:
        return False
    args = list(node.args) + [None] * (6 - len(node.args))
    self, src, dim, start, end, step = args
    dim = 0 if dim is None else dim
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    if start is not None and end is not None:
        return False
    graph = graph_module.graph
    with graph.inserting_before(node):
        if end is None:
            end = graph.call_function(torch.ops.aten.sym_size.int, (self, dim))
            end.meta["val"] = self.meta["val"].shape[dim]
    node.args = (self, src, dim, 0 if start is None else start, end, 1 if step is None else step)
    node.kwargs = {}
    return True


@register_onnx_translation(
    "torch.ops.aten._is_all_true.default",
    reason="torchlib has no translation for aten._is_all_true (torch.all(...) checks in VLM placeholder "
    "handling); lower it to a ReduceMin over the mask. Remove when torch.onnx translates it (export llava).",
)
def _is_all_true(x: Any) -> Any:
    import onnx_ir as ir
    from onnxscript import opset18

    op: Any = opset18  # its stubs type outputs as unions of tensor types that mypy cannot narrow

    as_int = op.Cast(x, to=ir.DataType.INT64)
    return op.Cast(op.ReduceMin(as_int, keepdims=0), to=ir.DataType.BOOL)


@register_onnx_translation(
    "torch.ops.aten.squeeze.dim",
    reason="torchlib writes aten.squeeze.dim as ONNX Squeeze on that axis whatever its size, but torch's squeeze of "
    "an axis that is not 1 leaves the tensor as it is; ORT then refuses the model at load ('Dimension of input 2 "
    "must be 1 instead of 3', ParakeetForRNNT's joint output squeeze(2)). An axis whose size is a known number other "
    "than 1 becomes an Identity. Remove when torchlib's squeeze.dim checks the axis size.",
)
def _squeeze_dim_like_torch(self: Any, dim: int) -> Any:
    from onnxscript import opset18

    op: Any = opset18  # its stubs type outputs as unions of tensor types that mypy cannot narrow

    shape = self.shape
    if shape is not None and len(shape) == 0:
        return op.Identity(self)
    if shape is not None and isinstance(size := shape[dim % len(shape)], int) and size != 1:
        return op.Identity(self)
    return op.Squeeze(self, op.Constant(value_ints=[dim]))  # an unknown rank or size: torchlib's own form


@register_onnx_translation(
    "torch.ops.aten.index_copy.default",
    reason="torch decomposes index_copy (a StaticCache's update along the sequence axis) into index_put, which "
    "torchlib writes as Transpose -> ScatterND -> Transpose: two full copies of every layer's cache per decode step, "
    "and ONNX Runtime cannot write the bound cache in place. ScatterElements on the cache's own axis needs no "
    "transpose (ORT skips its copy when the output is bound to the input's buffer). Remove when torchlib "
    "translates index_copy without transposes (check the decode graph of a static-cache export).",
)
def _index_copy_along_axis(self: Any, dim: int, index: Any, source: Any) -> Any:
    from onnxscript import opset18

    op: Any = opset18  # its stubs type outputs as unions of tensor types that mypy cannot narrow

    rank = len(self.shape)
    axis = dim % rank
    column = [1] * rank
    column[axis] = -1
    indices = op.Expand(op.Reshape(index, op.Constant(value_ints=column)), op.Shape(source))
    return op.ScatterElements(self, indices, source, axis=axis)


@register_onnx_translation(
    "torch.ops.aten.scaled_dot_product_attention.default",
    min_opset=23,
    reason="From opset 23 torch translates SDPA into ONNX's Attention op. ONNX Runtime 1.32's CPU provider runs that "
    "op as its expanded function body (about 60 Shape/Cast/Concat/Pad/Where nodes per attention, with a bool or a "
    "float mask alike): written as MatMul/Softmax (the ten nodes below) the static-cache decode loop runs 1.7-1.8x "
    "faster with equal tokens (python benchmarks/profile_ort_step.py prints both graphs). torch's "
    "translation also checks q/k/v head counts statically: it raises 'SDPA (MHA) requires q_num_heads = "
    "kv_num_heads' for a symbolic head axis (T5's decode component traced with a size-1 batch and query) and "
    "for a single key/value head broadcast over the query heads without enable_gqa (Falcon's multi-query "
    "attention), which the math handles (MatMul broadcasts the head). The causal, grouped-query and dropout "
    "forms still go to torch's translation (hfexport's own SDPA patch passes none of them). Remove when ONNX "
    "Runtime runs the Attention op with a kernel of its own and the head check tolerates symbolic and broadcast "
    "heads.",
)
def _sdpa_as_attention_math(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    from torch.onnx._internal.exporter._torchlib.ops import nn as torchlib_nn

    if is_causal or enable_gqa or dropout_p:
        return torchlib_nn.aten_scaled_dot_product_attention_23(
            query, key, value, attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
        )
    return _attention_math(query, key, value, attn_mask, scale)


def _attention_math(query: Any, key: Any, value: Any, attn_mask: Any, scale: float | None) -> Any:
    """softmax(q @ k^T * scale + mask) @ v with every size read at run time (no static head check); rows the
    mask hides entirely give zeros, as torch's SDPA does."""
    import onnx_ir as ir
    from onnxscript import opset18

    op: Any = opset18  # its stubs type outputs as unions of tensor types that mypy cannot narrow

    scores = op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2]))
    if scale is None:
        head_dim = op.CastLike(op.Shape(query, start=-1), query)
        factor = op.Div(op.CastLike(op.Constant(value_float=1.0), query), op.Sqrt(head_dim))
    else:
        factor = op.CastLike(op.Constant(value_float=float(scale)), query)
    scores = op.Mul(scores, factor)
    if attn_mask is not None:
        if attn_mask.dtype == ir.DataType.BOOL:
            scores = op.Where(attn_mask, scores, op.CastLike(op.Constant(value_float=float("-inf")), query))
        else:
            scores = op.Add(scores, attn_mask)
    probabilities = op.Softmax(scores, axis=-1)
    # A query row the mask hides entirely softmaxes -inf over -inf: NaN. torch's SDPA gives that row zeros.
    probabilities = op.Where(op.IsNaN(probabilities), op.CastLike(op.Constant(value_float=0.0), query), probabilities)
    return op.MatMul(probabilities, value)


@register_onnx_ir_fix(
    reason="with Dim.AUTO, axes torch.export specialised to a constant still reach the ONNX graph as symbolic dims "
    "named '3', '32' (a SymInt that is a number); make them fixed so ORT and runners check them. Remove when "
    "torch.onnx writes such axes as dim_value."
)
def _numeric_symbolic_dims_as_fixed(model: Any) -> bool:
    import onnx_ir as ir

    changed = False
    values = list(model.graph.inputs) + list(model.graph.outputs)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        values.extend(node.outputs)
    for value in values:
        shape = value.shape
        if shape is None:
            continue
        dims = list(shape.dims)
        fixed = [
            int(d.value) if isinstance(d, ir.SymbolicDim) and isinstance(d.value, str) and d.value.isdigit() else d
            for d in dims
        ]
        if fixed != dims:
            value.shape = ir.Shape(fixed)
            changed = True
    return changed

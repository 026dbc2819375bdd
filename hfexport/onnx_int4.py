"""ONNX Runtime's int4: the graph pass of the ``int4`` scheme, and the tables it quantizes for the trace.

Each ``nn.Linear`` call becomes ``MatMulNBits`` and each embedding lookup ``GatherBlockQuantized``, both over
onnxruntime's own blockwise symmetric int4 (``quantize_matmul_4bits``): a table tied to the head is the head's
weight, stored once. Before the trace every ``nn.Embedding`` table is swapped for its int4 values, so that what
the ONNX optimizer folds (a lookup at fixed positions) and what model code reads itself computes as the artifact's
lookups do. ``hfexport.quantization`` registers the scheme; this module is its arithmetic.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["embedding_tables_for_trace", "quantize_onnx_int4", "tables_shared"]


def _module_call(node: Any, aten_op: str, base: str) -> bool:
    """Whether an ONNX node computes the ``aten_op`` of a ``torch.nn.<base>`` module (or a subclass of it) itself:
    its metadata's innermost op and module class. A matmul that model code writes with a weight of its own is
    none."""
    import ast

    hierarchy = node.metadata_props.get("pkg.torch.onnx.class_hierarchy")
    if not hierarchy:
        return False
    classes = ast.literal_eval(hierarchy)
    return len(classes) >= 2 and classes[-1].startswith(aten_op) and _subclass_of(classes[-2], base)


@functools.cache
def _subclass_of(class_path: str, base: str) -> bool:
    """Whether ``class_path`` (``package.module.Class``) is ``torch.nn.<base>`` or a subclass of it."""
    import pydoc

    import torch

    found = pydoc.locate(class_path)
    return isinstance(found, type) and issubclass(found, getattr(torch.nn, base))


def _is_linear_call(node: Any) -> bool:
    return _module_call(node, "aten.linear", "Linear")


def _is_embedding_lookup(node: Any) -> bool:
    """An ``nn.Embedding``'s lookup (Gemma's scaled embedding, a subclass, too)."""
    return _module_call(node, "aten.embedding", "Embedding")


def _constant_weight(node: Any) -> Any:
    """The [K, N] float32 weight of a MatMul (input B) or of a Gemm (B, transposed when ``transB``) that is a
    constant initializer and that the node multiplies plainly (Gemm: alpha = beta = 1, no transA); else None."""
    import numpy as np

    if node.domain not in ("", "ai.onnx") or node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2:
        return None
    if node.op_type == "Gemm":
        attributes = {name: attr.value for name, attr in node.attributes.items()}
        if attributes.get("alpha", 1.0) != 1.0 or attributes.get("beta", 1.0) != 1.0 or attributes.get("transA", 0):
            return None
    weight = node.inputs[1]
    if weight is None or not weight.is_initializer() or weight.const_value is None:
        return None
    array = weight.const_value.numpy()
    if array.ndim != 2 or array.dtype != np.float32:
        return None
    if node.op_type == "Gemm" and node.attributes.get("transB") is not None and node.attributes["transB"].value:
        array = array.T
    return array


@dataclass(frozen=True)
class _Int4Table:
    """A [N, K] float table (a linear layer's weight, out x in; an embedding's, rows x width) in MatMulNBits's
    layout: ``packed`` uint8 [N, blocks, block_size / 2] (two values a byte, zero point 8; a lookup reads it as
    [N, blocks * block_size / 2]), ``scales`` [N, blocks]. ``MatMulNBits`` and ``GatherBlockQuantized`` read the
    same two initializers."""

    packed: Any  # ir.Value
    scales: Any  # ir.Value
    k: int
    n: int
    blocks: int


def _quantize_4bits(weight_k_by_n: Any, group_size: int) -> tuple[Any, Any]:
    """onnxruntime's own blockwise symmetric int4 of ``weight_k_by_n`` ([K, N] float32, blocks of ``group_size``
    along K, a last partial block padded with zeros): packed [N, blocks, group_size / 2] uint8 (two values a
    byte, low nibble first, zero point 8) and scales [N, blocks]."""
    import numpy as np
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    k, n = weight_k_by_n.shape
    blocks = -(-k // group_size)
    padded = (
        np.pad(weight_k_by_n, ((0, blocks * group_size - k), (0, 0))) if blocks * group_size != k else weight_k_by_n
    )
    packed = np.zeros((n, blocks, group_size // 2), dtype=np.uint8)
    scales = np.zeros((n, blocks), dtype=np.float32)
    zero_points = np.zeros((n, (blocks + 1) // 2), dtype=np.uint8)
    quantize_matmul_4bits(
        packed, np.ascontiguousarray(padded, dtype=np.float32), scales, zero_points, group_size, n, k, True
    )
    return packed, scales


def _dequantize_4bits(packed: Any, scales: Any, k: int) -> Any:
    """The [N, K] float32 values ``_quantize_4bits`` stands for: what ``MatMulNBits`` and ``GatherBlockQuantized``
    compute with."""
    import numpy as np

    n, blocks, _ = packed.shape
    values = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, blocks, -1).astype(np.float32) - 8
    return (values * scales[:, :, None]).reshape(n, -1)[:, :k]


# Tables quantized for one trace, kept for the next trace of the same model while ``tables_shared()`` is open (the
# components of one export_for_generation): one copy of each table in memory instead of one per component program.
_SHARED_TABLES: contextvars.ContextVar[dict[tuple[int, int, int], tuple[Any, Any]] | None] = contextvars.ContextVar(
    "hfexport_shared_int4_tables", default=None
)


@contextlib.contextmanager
def tables_shared() -> Iterator[None]:
    """Within this context, the exports of one model share the tables a scheme quantizes for the trace (keyed by
    the parameter itself and its version: a table changed in place is quantized again); they are let go on exit."""
    token = _SHARED_TABLES.set({})
    try:
        yield
    finally:
        _SHARED_TABLES.reset(token)


@contextlib.contextmanager
def embedding_tables_for_trace(model: Any, group_size: int | None) -> Iterator[int]:
    """Every ``nn.Embedding`` table becomes a new parameter holding its int4 values (dequantized, computed by
    onnxruntime's own kernel) for the trace, in every module that holds it (a tied head too, so ties stay
    ties); the original parameters go back on exit. The graph pass then stores the lookups' tables in int4; this
    makes the lookups the ONNX optimizer folds into constants (a table read at fixed positions, as SigLIP's) and
    model code that reads a table itself compute with the same values. A new parameter, not new values in
    place: the exported program keeps the parameters it traced, and is lowered after this context ends."""
    import torch

    assert group_size is not None
    shared = _SHARED_TABLES.get()
    holders: dict[int, list[tuple[Any, str]]] = {}
    for module in model.modules():
        for name, parameter in module._parameters.items():
            if parameter is not None:
                holders.setdefault(id(parameter), []).append((module, name))
    swapped: list[tuple[Any, str, Any]] = []
    tables = 0
    try:
        for module in model.modules():
            weight = module._parameters.get("weight") if isinstance(module, torch.nn.Embedding) else None
            if weight is None or not weight.is_floating_point() or id(weight) not in holders:
                continue  # not a float table, or one swapped already through a module that shares it
            key = (id(weight), weight._version, group_size)
            known = shared.get(key) if shared is not None else None
            if known is not None and known[0] is weight:
                replacement = known[1]
            else:
                table = weight.detach().to(torch.float32).cpu().numpy()
                packed, scales = _quantize_4bits(table.T, group_size)
                values = torch.from_numpy(_dequantize_4bits(packed, scales, table.shape[1]))
                replacement = torch.nn.Parameter(values.to(weight.dtype).to(weight.device), weight.requires_grad)
                if shared is not None:
                    shared[key] = (weight, replacement)
            for holder, name in holders.pop(id(weight)):
                holder._parameters[name] = replacement
                swapped.append((holder, name, weight))
            tables += 1
        logger.info("int4: %d embedding tables quantized for the trace", tables)
        yield tables
    finally:
        for holder, name, weight in reversed(swapped):
            holder._parameters[name] = weight


def _int4_table(graph: Any, name: str, weight_k_by_n: Any, group_size: int, *, for_gather: bool) -> _Int4Table:
    """Quantize ``weight_k_by_n`` ([K, N], blocks of ``group_size`` along K, symmetric) with onnxruntime's own
    kernel, and register the packed weight and its scales as initializers of ``graph``. The packed weight is
    [N, blocks, block_size / 2] as ``MatMulNBits`` requires, or [N, blocks * block_size / 2] ``for_gather``."""

    k, n = weight_k_by_n.shape
    blocks = -(-k // group_size)
    packed, scales = _quantize_4bits(weight_k_by_n, group_size)
    packed_value = _initializer(graph, f"{name}_q4", packed.reshape(n, -1) if for_gather else packed)
    return _Int4Table(packed_value, _initializer(graph, f"{name}_q4_scales", scales), k, n, blocks)


def _initializer(graph: Any, name: str, array: Any) -> Any:
    """Register ``array`` (numpy) as an initializer of ``graph``, its type and shape on the value."""
    import onnx_ir as ir

    tensor = ir.Tensor(array, name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def _moves_first_axis_last(node: Any) -> Any:
    """The one consumer of ``node``'s output if it is a Transpose that moves axis 0 last, else None."""
    output = node.outputs[0]
    if output.is_graph_output() or len(output.uses()) != 1:
        return None
    consumer = next(iter(output.uses())).node
    if consumer.domain not in ("", "ai.onnx") or consumer.op_type != "Transpose":
        return None
    perm = consumer.attributes.get_ints("perm")
    return consumer if perm is not None and list(perm) == [*range(1, len(perm)), 0] else None


def _drop_if_unused(graph: Any, value: Any) -> None:
    if not value.uses():
        graph.initializers.pop(value.name, None)


def quantize_onnx_int4(model: Any, group_size: int) -> int:
    """Replace each ``nn.Linear`` call (a MatMul, or a Gemm for 2-D inputs, whose weight is a constant 2-D
    float32 initializer) by ``MatMulNBits`` (4 bits, symmetric, blocks of ``group_size`` along K), quantized by
    onnxruntime's own kernel; a Gemm's bias becomes the node's bias input. Then each embedding lookup by
    ``GatherBlockQuantized`` over the same layout (blocks along the embedding width): an ``nn.Embedding``'s
    ``Gather`` on its table, and a ``Gather`` on a quantized linear weight's output axis, which is how the ONNX
    optimizer leaves a table tied to the head; that one reads the head's initializers, so the artifact holds the
    tied table once, in int4. Returns the count of linear layers and lookups quantized."""
    import numpy as np
    import onnx_ir as ir

    from .patching.onnx_fixes import swap_in  # imports torch: not on this module's import

    graph = model.graph
    count = 0
    # initializer name -> (its int4 table, the axis of the initializer that is N: 1 for MatMul's [K, N], 0 for a
    # transposed Gemm weight)
    tables: dict[str, tuple[_Int4Table, int]] = {}
    for node in list(graph):
        array = _constant_weight(node) if _is_linear_call(node) else None
        if array is None:
            continue
        weight = node.inputs[1]
        transposed = node.op_type == "Gemm" and bool(node.attributes.get_int("transB", 0))
        if weight.name in tables:
            table = tables[weight.name][0]
        else:
            table = _int4_table(graph, weight.name, array, group_size, for_gather=False)
            tables[weight.name] = (table, 0 if transposed else 1)
        inputs = [node.inputs[0], table.packed, table.scales]
        bias = node.inputs[2] if node.op_type == "Gemm" and len(node.inputs) > 2 else None
        if bias is not None:
            inputs += [None, None, bias]  # zero points and g_idx absent
        replacement = ir.Node(
            "com.microsoft",
            "MatMulNBits",
            inputs=inputs,
            attributes=[
                ir.AttrInt64("K", table.k),
                ir.AttrInt64("N", table.n),
                ir.AttrInt64("bits", 4),
                ir.AttrInt64("block_size", group_size),
            ],
            name=f"{node.name}_q4",
            metadata_props=dict(node.metadata_props),  # the module scopes: the locator still names the layer
        )
        swap_in(graph, node, [replacement])
        _drop_if_unused(graph, weight)
        count += 1
    lookups = 0
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type != "Gather":
            continue
        table_value, axis = node.inputs[0], node.attributes.get_int("axis", 0)
        if table_value is None or not table_value.is_initializer() or table_value.const_value is None:
            continue
        shared = tables.get(table_value.name)
        if shared is not None and axis == shared[1]:
            table = shared[0]
        elif axis == 0 and _is_embedding_lookup(node):
            array = table_value.const_value.numpy()
            if array.ndim != 2 or array.dtype.name != "float32":
                continue
            table = _int4_table(graph, table_value.name, array.T, group_size, for_gather=True)
        else:
            continue
        replaced = node
        if axis == 1:  # the optimizer's Gather of columns gives [K, *indices]; GatherBlockQuantized [*indices, K]
            replaced = _moves_first_axis_last(node)
            if replaced is None:
                logger.info("int4: lookup %s left float: its columns are not transposed back", node.name)
                continue
        replacements, packed = [], table.packed
        if len(packed.const_value.shape) == 3:  # the head's weight: its rows as one run of bytes each
            rows = _initializer(graph, f"{node.name}_q4_rows", np.array([table.n, -1], dtype=np.int64))
            replacements.append(ir.Node("", "Reshape", inputs=[packed, rows], name=f"{node.name}_q4_rows"))
            packed = replacements[-1].outputs[0]
        gathered = ir.Node(
            "com.microsoft",
            "GatherBlockQuantized",
            inputs=[packed, node.inputs[1], table.scales],
            attributes=[
                ir.AttrInt64("bits", 4),
                ir.AttrInt64("block_size", group_size),
                ir.AttrInt64("gather_axis", 0),
                ir.AttrInt64("quantize_axis", 1),
            ],
            name=f"{node.name}_q4",
            metadata_props=dict(node.metadata_props),
        )
        replacements.append(gathered)
        if table.blocks * group_size != table.k:  # rows come back padded to whole blocks: cut to the width
            bounds = [
                _initializer(graph, f"{node.name}_q4_{part}", np.array([value], dtype=np.int64))
                for part, value in (("start", 0), ("end", table.k), ("axis", -1))
            ]
            replacements.append(
                ir.Node("", "Slice", inputs=[gathered.outputs[0], *bounds], name=f"{node.name}_q4_width")
            )
        swap_in(graph, replaced, replacements, removed=() if replaced is node else (node,))
        _drop_if_unused(graph, table_value)
        lookups += 1
    if count or lookups:
        model.opset_imports.setdefault("com.microsoft", 1)
    logger.info(
        "int4: %d linear layers to MatMulNBits, %d embedding lookups to GatherBlockQuantized (block %d)",
        count,
        lookups,
        group_size,
    )
    return count + lookups

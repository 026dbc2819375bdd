"""Weight quantization through the configs: one table of schemes, each registered once.

A config's ``quantization`` names a scheme and ``quantization_group_size`` its block size (None: the scheme's
default). A scheme says which backends carry it and how: an eager-side transform applied to the model for the
trace and undone after (the caller's model comes back exactly as it was), and/or a pass over the lowered ONNX
graph. What each scheme computes is written here so that a judge can rebuild the same arithmetic in eager and
check the artifact exactly:

* ``int8``: every ``nn.Linear``'s weight as int8 with one symmetric scale per output channel
  (``scale = max|w| / 127``, ``q = round(w / scale)``); activations stay float. The graph holds the int8 weight
  and computes ``linear(x, q) * scale``; model code that reads a layer's ``weight`` itself gets the dequantized
  weight. Dynamo, ONNX and ExecuTorch.
* ``int4``: every ``nn.Linear`` call (a ``MatMul``, or a ``Gemm`` for 2-D inputs, whose weight the ONNX optimizer
  folded into a constant; the nodes' module metadata says which) as ONNX Runtime's ``MatMulNBits``: 4-bit blocks
  of ``group_size`` along the input axis, symmetric (``scale = v / -8`` for the block's largest-magnitude value
  ``v``, ``q = clamp(round(w / scale), -8, 7)``; a last partial block is padded with zeros), float activations;
  quantized by onnxruntime's own kernel. Every ``nn.Embedding`` table too, in the same blocks along its width:
  each lookup becomes ``GatherBlockQuantized``, and a table tied to the head reads the head's int4 weight, so the
  artifact holds it once. ONNX only.
* ``8da4w``: every ``nn.Linear`` whose input width the group size divides, through torchao's
  ``Int8DynamicActivationIntxWeightConfig``: int4 symmetric weights per group of ``group_size``, int8
  asymmetric activations quantized per token at run time; XNNPACK runs it as integer kernels. ExecuTorch with
  the XNNPACK backend only.
* ``8da8w``: as ``8da4w`` with int8 symmetric weights, one scale per output channel, on every ``nn.Linear``
  (XNNPACK's qd8-f32-qc8w kernels). The fast 8-bit scheme on ExecuTorch: XNNPACK has no kernel for float
  activations with int8 weights, so ``int8`` there converts each weight to float on every call, outside the
  delegate.

No scheme touches ``MultiheadAttention``'s ``out_proj`` (attention reads its weight, never calls it).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["QuantizationScheme", "SCHEMES", "check_config", "quantized_for_trace", "quantize_onnx_graph"]


@dataclass(frozen=True)
class QuantizationScheme:
    """One scheme: where it applies and how."""

    name: str
    definition: str
    backends: tuple[str, ...]
    default_group_size: int | None  # None: per output channel, no group size
    # Applied to the model for the trace, undone after: (model, group_size) -> context manager.
    eager: Callable[[Any, int | None], contextlib.AbstractContextManager[Any]] | None = None
    # Applied to the lowered ONNX IR model in place: (model, group_size) -> number of weights quantized.
    onnx_graph: Callable[[Any, int], int] | None = None
    executorch_backends: tuple[str, ...] = ()  # where non-empty, the ExecuTorch delegates that run it


def _linears(model: Any) -> Iterator[tuple[Any, str, Any]]:
    """(parent, attribute, linear) for every ``nn.Linear`` with a floating weight, each once; not
    ``MultiheadAttention``'s ``out_proj`` (a ``NonDynamicallyQuantizableLinear``: attention reads its weight
    itself, never calls it)."""
    import torch

    skipped = torch.nn.modules.linear.NonDynamicallyQuantizableLinear
    seen: set[int] = set()
    for parent in model.modules():
        for attribute, child in parent.named_children():
            if (
                isinstance(child, torch.nn.Linear)
                and not isinstance(child, skipped)
                and child.weight.is_floating_point()
                and id(child) not in seen
            ):
                seen.add(id(child))
                yield parent, attribute, child


def _int8_linear_class() -> type:
    """The int8 linear module (built on first use: importing this module must not import torch)."""
    import torch

    class Int8WeightLinearModule(torch.nn.Module):
        """``nn.Linear`` with an int8 weight and one scale per output channel; ``linear(x, q) * scale`` keeps the
        weight int8 in the graph (the artifact) and applies the scale once per output."""

        weight_int8: torch.Tensor
        weight_scale: torch.Tensor

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            weight = linear.weight.detach()
            scale = (weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(weight.dtype).tiny)
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.register_buffer("weight_int8", torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8))
            self.register_buffer("weight_scale", scale)
            self.bias = linear.bias

        @property
        def weight(self) -> torch.Tensor:
            """The dequantized weight, for model code that reads ``layer.weight`` itself (Mamba's ``dt_proj``)."""
            return self.weight_int8.to(self.weight_scale.dtype) * self.weight_scale[:, None]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.nn.functional.linear(x, self.weight_int8.to(x.dtype)) * self.weight_scale.to(x.dtype)
            return out if self.bias is None else out + self.bias

    return Int8WeightLinearModule


@contextlib.contextmanager
def _int8_weights(model: Any, group_size: int | None) -> Iterator[int]:
    """Swap every floating ``nn.Linear`` for its int8 form; the originals go back on exit."""
    module_class = _int8_linear_class()
    swapped = []
    try:
        for parent, attribute, linear in list(_linears(model)):
            parent._modules[attribute] = module_class(linear)
            swapped.append((parent, attribute, linear))
        logger.info("int8: %d linear layers quantized", len(swapped))
        yield len(swapped)
    finally:
        for parent, attribute, linear in swapped:
            parent._modules[attribute] = linear


def _int8_dynamic_activations(weight_bits: int) -> Callable[[Any, int | None], contextlib.AbstractContextManager[int]]:
    """torchao's ``Int8DynamicActivationIntxWeightConfig`` with int``weight_bits`` weights: per group of
    ``group_size`` on every ``nn.Linear`` whose input width it divides, or per output channel (group size None) on
    every ``nn.Linear``. Each quantized layer's original weight parameter goes back on exit (tied weights stay
    tied)."""

    @contextlib.contextmanager
    def quantized(model: Any, group_size: int | None) -> Iterator[int]:
        import torch
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup

        name = f"8da{weight_bits}w"
        linears = [linear for _, _, linear in _linears(model)]
        chosen = {
            id(linear): linear for linear in linears if group_size is None or linear.in_features % group_size == 0
        }
        names = {id(m): module_name for module_name, m in model.named_modules()}
        left = sorted(names[id(linear)] for linear in linears if id(linear) not in chosen)
        if left:
            logger.info(
                "%s: %d linear layers stay float (input width not a multiple of %s): %s",
                name,
                len(left),
                group_size,
                ", ".join(left[:8]),
            )
        originals = {key: (linear, linear._parameters["weight"]) for key, linear in chosen.items()}
        try:
            with torch.no_grad():
                quantize_(
                    model,
                    Int8DynamicActivationIntxWeightConfig(
                        weight_dtype=getattr(torch, f"int{weight_bits}"),
                        weight_granularity=PerAxis(0) if group_size is None else PerGroup(group_size),
                    ),
                    filter_fn=lambda module, fqn: id(module) in chosen,
                )
            yield len(chosen)
        finally:
            for linear, weight in originals.values():
                linear._parameters["weight"] = weight
                linear.__dict__.pop("extra_repr", None)  # torchao describes the quantized weight on the instance

    return quantized


def _is_linear_call(node: Any) -> bool:
    """Whether an ONNX node computes an ``nn.Linear`` module's own ``aten.linear`` (its metadata's innermost
    module class), not a matmul that model code writes with a weight of its own."""
    import ast

    hierarchy = node.metadata_props.get("pkg.torch.onnx.class_hierarchy")
    if not hierarchy:
        return False
    classes = ast.literal_eval(hierarchy)
    return len(classes) >= 2 and classes[-1].startswith("aten.linear") and _names_a_linear(classes[-2])


@functools.cache
def _names_a_linear(class_path: str) -> bool:
    """Whether ``class_path`` (``package.module.Class``) is ``nn.Linear`` or a subclass of it."""
    import pydoc

    import torch

    found = pydoc.locate(class_path)
    return isinstance(found, type) and issubclass(found, torch.nn.Linear)


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


def _is_embedding_lookup(node: Any) -> bool:
    """Whether an ONNX node is an ``nn.Embedding`` module's own ``aten.embedding`` (its metadata's innermost
    module class is ``nn.Embedding`` or a subclass of it, such as Gemma's scaled embedding)."""
    import ast

    hierarchy = node.metadata_props.get("pkg.torch.onnx.class_hierarchy")
    if not hierarchy:
        return False
    classes = ast.literal_eval(hierarchy)
    return len(classes) >= 2 and classes[-1].startswith("aten.embedding") and _names_an_embedding(classes[-2])


@functools.cache
def _names_an_embedding(class_path: str) -> bool:
    import pydoc

    import torch

    found = pydoc.locate(class_path)
    return isinstance(found, type) and issubclass(found, torch.nn.Embedding)


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
def _int4_embedding_tables(model: Any, group_size: int | None) -> Iterator[int]:
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


def _replace(graph: Any, node: Any, replacements: list[Any]) -> None:
    """Put ``replacements`` (the last one computes the node's output) in the place of ``node``."""
    import onnx_ir as ir

    out, last = node.outputs[0], replacements[-1].outputs[0]
    last.shape, last.type = out.shape, out.type
    ir.convenience.replace_nodes_and_values(graph, node, [node], replacements, node.outputs, [last])


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
        _replace(graph, node, [replacement])
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
        _replace(graph, replaced, replacements)
        if replaced is not node:
            graph.remove(node, safe=True)
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


SCHEMES: dict[str, QuantizationScheme] = {}


def register_scheme(scheme: QuantizationScheme) -> QuantizationScheme:
    if scheme.name in SCHEMES:
        raise ValueError(f"quantization scheme {scheme.name!r} registered twice")
    SCHEMES[scheme.name] = scheme
    return scheme


register_scheme(
    QuantizationScheme(
        "int8",
        "int8 weights of every nn.Linear, one symmetric scale per output channel; float activations",
        ("dynamo", "onnx", "executorch"),
        None,
        eager=_int8_weights,
    )
)
register_scheme(
    QuantizationScheme(
        "int4",
        "ONNX Runtime MatMulNBits and GatherBlockQuantized: int4 symmetric blocks of group_size along the input "
        "axis of every linear weight and the width of every embedding table; float activations",
        ("onnx",),
        32,
        eager=_int4_embedding_tables,
        onnx_graph=quantize_onnx_int4,
    )
)
register_scheme(
    QuantizationScheme(
        "8da4w",
        "int8 dynamic per-token activations, int4 symmetric weights per group (torchao), on XNNPACK",
        ("executorch",),
        32,
        eager=_int8_dynamic_activations(4),
        executorch_backends=("xnnpack",),
    )
)
register_scheme(
    QuantizationScheme(
        "8da8w",
        "int8 dynamic per-token activations, int8 symmetric weights per output channel (torchao), on XNNPACK",
        ("executorch",),
        None,
        eager=_int8_dynamic_activations(8),
        executorch_backends=("xnnpack",),
    )
)


def group_size_of(config: Any) -> int | None:
    """The group size ``config`` quantizes with: its own, else its scheme's default."""
    scheme = SCHEMES[config.quantization]
    return config.quantization_group_size if config.quantization_group_size is not None else scheme.default_group_size


def check_config(config: Any) -> None:
    """ValueError naming the field and what is accepted, for a scheme this backend or delegate cannot carry."""
    name, kind = config.quantization, type(config).__name__
    fmt = str(getattr(config.export_format, "value", config.export_format))
    if name is None:
        if config.quantization_group_size is not None:
            raise ValueError(f"{kind}.quantization_group_size is set but quantization is None; name a scheme")
        return
    if name not in SCHEMES:
        raise ValueError(f"{kind}.quantization={name!r} is not a scheme; schemes: {sorted(SCHEMES)}")
    scheme = SCHEMES[name]
    if fmt not in scheme.backends:
        carried = sorted(s.name for s in SCHEMES.values() if fmt in s.backends)
        raise ValueError(
            f"{kind}.quantization={name!r} is for {', '.join(scheme.backends)}, not {fmt}; on {fmt} choose one of "
            f"{carried}"
        )
    size = config.quantization_group_size
    if size is not None:
        if scheme.default_group_size is None:
            raise ValueError(f"{kind}: {name!r} has one scale per output channel; leave quantization_group_size None")
        if isinstance(size, bool) or not isinstance(size, int) or size < 2 or size % 2:
            raise ValueError(f"{kind}.quantization_group_size must be an even int >= 2, got {size!r}")
    delegate = getattr(config, "backend", None)
    if scheme.executorch_backends and delegate not in scheme.executorch_backends:
        raise ValueError(
            f"{kind}.quantization={name!r} runs on the {', '.join(scheme.executorch_backends)} delegate, not "
            f"backend={delegate!r}; set backend={scheme.executorch_backends[0]!r}"
        )
    if scheme.onnx_graph is not None and getattr(config, "optimize", True) is False:
        raise ValueError(
            f"{kind}.quantization={name!r} quantizes the constant weights the ONNX optimizer folds; "
            "it needs optimize=True"
        )


def quantized_for_trace(model: Any, config: Any) -> contextlib.AbstractContextManager[Any]:
    """The config's eager-side quantization of ``model`` for the trace (undone on exit), or nothing."""
    scheme = SCHEMES.get(getattr(config, "quantization", None) or "")
    if scheme is None or scheme.eager is None:
        return contextlib.nullcontext()
    return scheme.eager(model, group_size_of(config))


def quantize_onnx_graph(model: Any, config: Any) -> None:
    """The config's pass over the lowered ONNX IR model, if its scheme has one; a scheme that finds nothing to
    quantize is an error (the artifact would claim a quantization it does not hold)."""
    scheme = SCHEMES.get(getattr(config, "quantization", None) or "")
    if scheme is None or scheme.onnx_graph is None:
        return
    if scheme.onnx_graph(model, group_size_of(config) or 0) == 0:
        from .errors import HfExportError

        raise HfExportError(
            f"quantization={scheme.name!r} found no MatMul with a constant float32 weight to quantize; "
            "the model has no linear layer the ONNX optimizer folded into one",
            stage="lowering",
        )

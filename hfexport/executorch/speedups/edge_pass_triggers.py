"""What each of EXIR's ATen-to-edge passes would rewrite, told from the graph before the pass runs.

``to_edge`` runs a chain of ``ExportPass`` subclasses over the whole program, and each one retraces every node on
fake tensors (about a quarter second per pass on a tiny Llama, symbolic sizes making every fake output costly),
though most rewrite only a few ops, or none: a transpose spelled ``aten.t``, a view op left by functionalisation,
a Python scalar or a symbolic size passed where the schema takes a tensor, mixed dtypes, a memory-format op. On the
zoo's programs most of them find nothing to rewrite.

XNNPACK's preprocess runs two more such passes on every partition: ``ConstPropPass``, which folds calls on constants
and finds none in a partition whose calls all read tensors the program computes, and ``DimOrderOpsRevertPass``,
which has nothing to revert in a partition without a dim-order op. ``to_executorch`` runs one more retrace of the
whole program that rewrites nothing at all: ``SpecPropPass`` refreshes every node's fake value before it reads
them (``METADATA_RETRACE``), though after a lowering only the nodes it added itself lack one.

``TRIGGERS`` holds, per pass class, a predicate that reads the graph the way the pass's ``call_operator`` reads
each call: same ops, same schema arguments (``map_args``), same values. It answers True ("may rewrite") whenever it
cannot tell, so a skip is only ever taken where the pass would have rebuilt the graph it was given. A subclass of a
listed pass is not listed: it may rewrite more. ``retraces`` skips the retrace where the predicate says
False; ``tests/test_executorch_one_trace.py`` checks the lowered programs against EXIR's own and makes each
predicate fail on a graph its pass rewrites.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Call targets EXIR's retrace hands to something other than ``call_operator`` (getitem, Python arithmetic on
# sizes): a pass's ``call_operator`` never sees them.
_NOT_OPERATOR_MODULES = ("_operator", "builtins", "math")


def _operator_calls(graph_module: torch.fx.GraphModule) -> Iterator[torch.fx.Node]:
    """The nodes, in every graph of ``graph_module``, whose call the retrace passes to ``call_operator`` (or to a
    handler that may: higher-order ops are kept, and the predicates treat what they cannot read as a rewrite)."""
    from executorch.exir.pass_base import _TORCH_SYM_OPS

    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            if getattr(node.target, "__module__", None) in _NOT_OPERATOR_MODULES or node.target in _TORCH_SYM_OPS:
                continue
            yield node


def _plain_op(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """The node's ATen-style overload, or None for anything else (a packet, an edge op, a higher-order op)."""
    target = node.target
    return target if type(target) is torch._ops.OpOverload else None


def _schema_values(op: torch._ops.OpOverload, node: torch.fx.Node) -> Iterator[tuple[Any, Any]]:
    """(value, schema argument) pairs, paired as EXIR's ``map_args`` pairs them."""
    for i, schema in enumerate(op._schema.arguments):
        if schema.name in node.kwargs:
            yield node.kwargs[schema.name], schema
        elif not schema.kwarg_only and i < len(node.args):
            yield node.args[i], schema


def _value(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def calls_plain_transpose(graph_module: torch.fx.GraphModule) -> bool:
    """``NormalizeTransposePass``: rewrites ``aten.t.default`` only."""
    return any(n.target == torch.ops.aten.t.default for n in _operator_calls(graph_module))


def calls_a_view_op(graph_module: torch.fx.GraphModule) -> bool:
    """``ReplaceBrokenOpsWithFunctionalOpsPass``: rewrites every op whose overload is a view."""
    return any(getattr(n.target, "is_view", True) for n in _operator_calls(graph_module))


def _gives_a_tensor_argument(graph_module: torch.fx.GraphModule, test: Callable[[Any], bool]) -> bool:
    """Whether some call gives a value that passes ``test`` for a Tensor argument of its schema (True where a call
    is not a plain overload, whose schema this cannot read)."""
    for node in _operator_calls(graph_module):
        op = _plain_op(node)
        if op is None:
            return True
        for value, schema in _schema_values(op, node):
            if isinstance(schema.type, torch.TensorType) and test(value):
                return True
    return False


def passes_a_literal_as_tensor(graph_module: torch.fx.GraphModule) -> bool:
    """``ScalarToTensorPass``: rewrites a Python int, float or bool given for a Tensor argument."""
    return _gives_a_tensor_argument(graph_module, lambda value: isinstance(value, (float, int, bool)))


_SYMBOLS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def passes_a_symbol_as_tensor(graph_module: torch.fx.GraphModule) -> bool:
    """``SymToTensorPass``: rewrites a symbolic size given for a Tensor argument."""
    return _gives_a_tensor_argument(graph_module, lambda value: type(_value(value)) in _SYMBOLS)


def _promotion_kinds() -> dict[Any, Any]:
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND

    aten = torch.ops.aten
    return {
        aten.add.Tensor: KIND.DEFAULT,
        aten.mul.Tensor: KIND.DEFAULT,
        aten.sub.Tensor: KIND.DEFAULT,
        aten.div.Tensor: KIND.INT_TO_FLOAT,
        aten.div.Tensor_mode: KIND.DEFAULT,
        aten.minimum.default: KIND.DEFAULT,
    }


def mixes_dtypes(graph_module: torch.fx.GraphModule) -> bool:
    """``RemoveMixedTypeOperators``: on its binary ops, casts each Tensor argument whose dtype is not the promoted
    one (a literal there is cast too). A symbolic argument counts as a rewrite: the pass promotes it through a
    tensor this check does not build."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
    from torch._prims_common import elementwise_dtypes

    kinds = _promotion_kinds()
    for node in _operator_calls(graph_module):
        kind, op = kinds.get(node.target), _plain_op(node)
        if kind is None or op is None or len(node.args) <= 1:
            continue
        if node.target == torch.ops.aten.div.Tensor_mode and node.kwargs.get("rounding_mode") is None:
            kind = KIND.INT_TO_FLOAT
        values = [_value(a) for a in node.args]
        if any(type(v) in _SYMBOLS or v is None and isinstance(a, torch.fx.Node) for v, a in zip(values, node.args)):
            return True
        promoted = elementwise_dtypes(*values, type_promotion_kind=kind)[1]
        for value, schema in _schema_values(op, node):
            if not isinstance(schema.type, torch.TensorType):
                continue
            value = _value(value)
            if not (isinstance(value, torch.Tensor) and value.dtype == promoted):
                return True
    return False


def calls_a_memory_format_op(graph_module: torch.fx.GraphModule) -> bool:
    """``MemoryFormatOpsPass``: rewrites the edge ops that take a memory format into their dim-order twins."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload
    from executorch.exir.passes.dim_order_ops_registry import DimOrderOpsMap

    calls = _operator_calls(graph_module)
    return any(isinstance(n.target, EdgeOpOverload) and n.target in DimOrderOpsMap for n in calls)


def may_fold_constants(graph_module: torch.fx.GraphModule) -> bool:
    """``ConstPropPass`` (run by XNNPACK's preprocess on every partition): folds a call whose arguments are all
    constants. Any call that reads no node but constant attributes (``get_attr``) may be one."""
    for node in _operator_calls(graph_module):
        leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
        if all(not isinstance(leaf, torch.fx.Node) or leaf.op == "get_attr" for leaf in leaves):
            return True
    return False


def reads_a_non_default_dim_order(graph_module: torch.fx.GraphModule) -> bool:
    """``LegalizePortableDimOrderPass`` (``to_executorch``): copies to the default dim order the input of each op it
    legalizes (portable mean, sum, pooling, ``expand_copy``) that has another one, or whose metadata does not tell."""
    from executorch.exir.passes.legalize_portable_dim_order_pass import LegalizePortableDimOrderPass

    for node in _operator_calls(graph_module):
        if node.target not in LegalizePortableDimOrderPass._target_ops:
            continue
        value = _value(node.args[0]) if node.args else None
        if not isinstance(value, torch.Tensor) or tuple(int(d) for d in value.dim_order()) != tuple(range(value.dim())):
            return True
    return False


def calls_a_dim_order_op(graph_module: torch.fx.GraphModule) -> bool:
    """``DimOrderOpsRevertPass`` (XNNPACK's preprocess, per partition): rewrites the dim-order edge ops back into
    their memory-format twins."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload
    from executorch.exir.passes.dim_order_ops_registry import MemoryFormatOpsMap

    calls = _operator_calls(graph_module)
    return any(isinstance(n.target, EdgeOpOverload) and n.target in MemoryFormatOpsMap for n in calls)


def lacks_a_value(graph_module: torch.fx.GraphModule) -> bool:
    """A plain ``ExportPass`` (``SpecPropPass`` runs one first, in ``to_executorch``) rewrites nothing: its retrace
    records every node's fake value again, for the tensor specs memory planning reads. In hfexport's lowering only
    nodes added without a retrace can lack a value or hold a stale one:

    - ``to_executorch``'s buffer write-backs are ``copy_`` nodes without a value: the retrace runs;
    - ``to_backend``'s delegate calls carry their partitions' output values;
    - hfexport's ``cache_updates_in_place`` turns a functional update into its in-place twin, whose value is then
      not its input's; memory planning aliases an in-place result to its input by schema, not by value, and the
      emitted program came out the same either way (``tests/test_executorch_spec_refresh.py``).

    So a placeholder or call without a value means "may change"."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            if any(n.op in ("placeholder", "call_function") and "val" not in n.meta for n in module.graph.nodes):
                return True
    return False


# The plain retrace: it rewrites no node, so it is held against the values it would record, not the graph.
METADATA_RETRACE = "executorch.exir.pass_base.ExportPass"

# Pass class (module.qualname, matched exactly) -> whether the pass may rewrite the graph.
TRIGGERS: dict[str, Callable[[torch.fx.GraphModule], bool]] = {
    "executorch.exir.passes.normalize_transpose_pass.NormalizeTransposePass": calls_plain_transpose,
    "executorch.exir.passes.replace_broken_ops_with_function_ops_pass.ReplaceBrokenOpsWithFunctionalOpsPass": (
        calls_a_view_op
    ),
    "executorch.exir.passes.scalar_to_tensor_pass.ScalarToTensorPass": passes_a_literal_as_tensor,
    "executorch.exir.passes.sym_to_tensor_pass.SymToTensorPass": passes_a_symbol_as_tensor,
    "executorch.exir.passes.remove_mixed_type_operators.RemoveMixedTypeOperators": mixes_dtypes,
    "executorch.exir.passes.memory_format_ops_pass.MemoryFormatOpsPass": calls_a_memory_format_op,
    "executorch.exir.passes.const_prop_pass.ConstPropPass": may_fold_constants,
    "executorch.exir.passes.legalize_portable_dim_order_pass.LegalizePortableDimOrderPass": (
        reads_a_non_default_dim_order
    ),
    "executorch.exir.passes.memory_format_ops_pass.DimOrderOpsRevertPass": calls_a_dim_order_op,
    METADATA_RETRACE: lacks_a_value,
}


def rewrites_nothing(pass_: Any, graph_module: torch.fx.GraphModule) -> bool:
    """True where ``pass_`` is one of ``TRIGGERS``' passes (not a subclass) and its predicate finds nothing."""
    cls = type(pass_)
    trigger = TRIGGERS.get(f"{cls.__module__}.{cls.__qualname__}")
    return trigger is not None and not trigger(graph_module)

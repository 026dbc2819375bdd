"""Runner for torch.export programs (.pt2 files or in-memory ExportedPrograms)."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from .. import caches
from ..errors import RunnerInputError
from ..outputs import flatten_named
from .base import Runner
from .program_store import load_program

Ranges = dict[str, dict[int, tuple[int, int | None]]]


def _finite(bound: Any) -> int | None:
    """A range bound as an int; None for torch's and sympy's infinities (which ``int()`` cannot convert)."""
    from torch.utils._sympy.numbers import int_oo

    if bound in (int_oo, -int_oo) or getattr(bound, "is_infinite", False):
        return None
    try:
        return int(bound)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def declared_ranges(program: torch.export.ExportedProgram, template: Any) -> Ranges:
    """flat input name -> {axis: (min, max or None)} for every axis that is a plain symbol of the program.

    ``ExportedProgram.module()`` enforces a symbol's upper bound but not its lower one (a seq=1 input ran
    through a ``Dim(min=2)`` program): the runner checks both. Empty when the program's tensor inputs cannot
    be matched to the flat names one to one."""
    flat = flatten_named(template)
    names = [n for n, v in flat.items() if isinstance(v, torch.Tensor)]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    specs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind.name == "USER_INPUT" and type(spec.arg).__name__ == "TensorArgument"
    ]
    tensors = [placeholders[name] for name in specs if name in placeholders]
    if len(tensors) != len(names) or len(tensors) != len(specs):
        return {}
    ranges: Ranges = {}
    for name, node in zip(names, tensors):
        value = node.meta.get("val")
        for axis, size in enumerate(getattr(value, "shape", ())):
            expr = size.node.expr if isinstance(size, torch.SymInt) else None
            bounds = program.range_constraints.get(expr) if expr is not None and expr.is_Symbol else None
            if bounds is None:
                continue
            ranges.setdefault(name, {})[axis] = (_finite(bounds.lower) or 0, _finite(bounds.upper))
    return ranges


class DynamoRunner(Runner):
    """Rebuilds the program's structured inputs (caches included) from flat names, using the
    program's own example inputs as the template, then calls ``program.module()``."""

    backend = "dynamo"

    def __init__(self, program: Any) -> None:
        caches.register_cache_pytrees()
        if not isinstance(program, torch.export.ExportedProgram):
            program = load_program(program)
        self.program = program
        self.module = program.module()
        if program.example_inputs is None:
            raise ValueError("this ExportedProgram carries no example_inputs; re-export it with hfexport")
        _, self._template = program.example_inputs
        self._names = list(flatten_named(self._template).keys())
        self.ranges = declared_ranges(program, self._template)

    @property
    def input_names(self) -> list[str]:
        return self._names

    def structured(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Flat named inputs -> the kwargs the program was traced with. The leaves come from the saved example
        inputs (ints stay ints); the structure from the program's call spec (a saved example may hold plain
        dicts where the trace had ModelOutputs)."""
        leaves, template_spec = pytree.tree_flatten(self._template)
        values = [flat_inputs[n] for n in self._names]
        rebuilt: list[Any] = []
        it = iter(values)
        for leaf in leaves:
            if leaf is None:
                rebuilt.append(None)
                continue
            value = next(it)
            rebuilt.append(int(value) if isinstance(leaf, int) and isinstance(value, torch.Tensor) else value)
        in_spec = self.program.call_spec.in_spec
        if in_spec is not None and in_spec.num_leaves == len(rebuilt):
            _, kwargs = pytree.tree_unflatten(rebuilt, in_spec)
            return kwargs
        return pytree.tree_unflatten(rebuilt, template_spec)

    def check_ranges(self, flat_inputs: dict[str, torch.Tensor]) -> None:
        """Refuse an input outside the program's declared dynamic ranges (the module checks upper bounds only)."""
        for name, axes in self.ranges.items():
            tensor = flat_inputs.get(name)
            if not isinstance(tensor, torch.Tensor):
                continue
            for axis, (low, high) in axes.items():
                size = tensor.shape[axis] if axis < tensor.dim() else None
                if size is not None and (size < low or (high is not None and size > high)):
                    raise RunnerInputError(
                        f"DynamoRunner: input {name!r} has size {size} on axis {axis}; the program was exported "
                        f"for {low}..{'any' if high is None else high} there (its Dim range). Re-export with a "
                        "Dim range that includes this size."
                    )

    def run_flat(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.check_ranges(flat_inputs)
        with torch.no_grad():
            out = self.module(**self.structured(flat_inputs))
        return flatten_named(out)


# Nodes whose only job is to check what the caller passed (input shapes, the dtype and device of tensors made
# from the inputs): their verdict depends on the inputs' shapes and dtypes alone.
_INPUT_CHECK_MODULES = ("_guards_fn",)
_INPUT_CHECK_OPS = (torch.ops.aten._assert_tensor_metadata.default,)


class FlatGraph:
    """An unlifted ``ExportedProgram.module()`` called with flat tensors, for a loop that calls it many times
    with inputs of one signature.

    Each call of the module itself flattens the structured inputs (the cache object included), runs the input
    range checks and the shape guards, then runs a ``_assert_tensor_metadata`` per dtype conversion: on a small
    decode step that is a large share of the step. All of it depends only on the shapes and dtypes of the
    inputs, so ``DecodeLoop`` runs the module once per new signature and this graph for the later calls.

    The graph also returns, per graph input it updates in place, the tensor the update returned: where the
    runtime wrote, read from the graph's own results."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        graph = torch.fx.Graph()
        outputs = graph.graph_copy(module.graph, {})
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        written: dict[int, torch.fx.Node] = {}
        for node in list(graph.nodes):
            if (node.op == "call_module" and node.target in _INPUT_CHECK_MODULES) or (
                node.op == "call_function" and node.target in _INPUT_CHECK_OPS
            ):
                graph.erase_node(node)
            elif node.op == "call_function" and _is_in_place(node) and node.args and node.args[0] in placeholders:
                written[placeholders.index(node.args[0])] = node
        self.n_outputs = len(outputs) if isinstance(outputs, (list, tuple)) else 1
        flat_outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        graph.output(tuple(flat_outputs + list(written.values())))
        graph.lint()
        self.written_inputs = list(written)
        if module._out_spec is None:
            raise ValueError("FlatGraph takes an unlifted ExportedProgram.module() (it has no output spec)")
        self.out_spec = module._out_spec
        self.graph_module = torch.fx.GraphModule(module, graph)

    def __call__(self, flat_inputs: list[torch.Tensor]) -> tuple[Any, dict[int, torch.Tensor]]:
        """(the module's structured outputs, {flat input index: the tensor the graph wrote it to})."""
        results = self.graph_module(*flat_inputs)
        outputs = pytree.tree_unflatten(list(results[: self.n_outputs]), self.out_spec)
        return outputs, dict(zip(self.written_inputs, results[self.n_outputs :]))


def _is_in_place(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return bool(
        schema is not None
        and schema.arguments
        and schema.arguments[0].alias_info is not None
        and schema.arguments[0].alias_info.is_write
    )

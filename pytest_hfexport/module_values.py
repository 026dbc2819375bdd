"""What each module of the eager model computed inside an artifact: the values that leave its scope.

Localising a mismatch (``pytest_hfexport.localise``) compares every eager module's output with the value the
artifact computed for that module. Each backend's format says which module a value belongs to:

* Dynamo (``.pt2``): every node carries ``nn_module_stack`` (the qualified module names it ran inside); the
  saved program is run node by node (``torch.fx.Interpreter``).
* ONNX (``.onnx``): every node carries ``pkg.torch.onnx.name_scopes``; a debug copy of the graph lists the
  module-boundary values as extra graph outputs and ONNX Runtime runs it (the artifact itself is not touched).
* ExecuTorch: the ``.pte`` keeps no module names, so the locator runs the ExecuTorch program (the
  executorch-dialect graph the ``.pte`` was emitted from, every delegate through the partition it lowered)
  node by node in PyTorch: it names divergences that are in the program; one that arises only in ExecuTorch's
  kernels shows up as a program that matches eager at every module.

A value *leaves* a module's scope when some op outside the module (or the graph's output) reads it; only those
values are a module's outputs (a value read only inside the module, such as a linear layer's output that the
same module rescales, is not). ``ModuleValues`` maps a qualified module name to those tensors (every call).
"""

from __future__ import annotations

import ast
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ModuleValues = dict[str, list[Any]]


def _stack_paths(node: Any) -> frozenset[str]:
    stack = node.meta.get("nn_module_stack") or {}
    return frozenset(path for path, _type in stack.values() if path)


def _leaving(scopes: Mapping[str, frozenset[str]], readers: Mapping[str, list[frozenset[str]]], outputs: set[str]):
    """``{value: modules it leaves}``: the modules of its producer that some reader (or the graph output) is
    outside of."""
    leaving: dict[str, set[str]] = {}
    for value, modules in scopes.items():
        if not modules:
            continue
        left = set()
        for module in modules:
            if value in outputs or any(module not in reader for reader in readers.get(value, [])):
                left.add(module)
        if left:
            leaving[value] = left
    return leaving


# -- Dynamo and ExecuTorch: an FX graph run node by node ---------------------------------------------------


def _lifted_inputs(program: Any, user_inputs: list[Any]) -> list[Any]:
    """The placeholders of ``program.graph_module`` in order: its parameters, buffers and constants from the
    program, then ``user_inputs``."""
    from torch.export.graph_signature import InputKind

    users = iter(user_inputs)
    flat = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            flat.append(next(users))
        elif spec.target in program.state_dict:
            flat.append(program.state_dict[spec.target])
        else:
            flat.append(program.constants[spec.target])
    return flat


def _is_delegate(node: Any) -> bool:
    return node.op == "call_function" and "call_delegate" in str(node.target)


class _Graph:
    """One FX graph's module facts: each node's scope (the modules it ran inside) and the scopes of every op
    that reads it. An ExecuTorch delegate call is looked through: its outputs take the scopes of the ops inside
    the partition that produced them, and its inputs are read by the ops inside that read them."""

    def __init__(self, graph_module: Any, output_readers: list[list[frozenset[str]]] | None = None) -> None:
        import operator

        self.graph_module = graph_module
        self.scopes = {n.name: _stack_paths(n) for n in graph_module.graph.nodes}
        self.readers: dict[str, list[frozenset[str]]] = defaultdict(list)
        self.outputs: set[str] = set()
        self.inner: dict[str, _Graph] = {}
        delegates = [n for n in graph_module.graph.nodes if _is_delegate(n)]
        returned_by: dict[str, list[Any]] = {}
        for node in delegates:
            program = getattr(graph_module, node.args[0].target).original_module
            inner_nodes = list(program.graph_module.graph.nodes)
            returned = next(n for n in inner_nodes if n.op == "output").args[0]
            returned_by[node.name] = list(returned) if isinstance(returned, (list, tuple)) else [returned]
            for user in node.users:
                if user.target is operator.getitem and isinstance(user.args[1], int):
                    source = returned_by[node.name][user.args[1]]
                    self.scopes[user.name] = _stack_paths(source) if hasattr(source, "meta") else frozenset()
            placeholders = [n for n in inner_nodes if n.op == "placeholder"]
            args = node.args[1:]
            for arg, placeholder in zip(args, placeholders[len(placeholders) - len(args) :]):
                if hasattr(arg, "name"):
                    self.readers[arg.name].extend(_stack_paths(u) for u in placeholder.users)
        returned_here = next(n for n in graph_module.graph.nodes if n.op == "output").args[0]
        returned_here = list(returned_here) if isinstance(returned_here, (list, tuple)) else [returned_here]
        for node in graph_module.graph.nodes:
            for arg in node.all_input_nodes:
                if node.op == "output":
                    if output_readers is None:
                        self.outputs.add(arg.name)
                elif not _is_delegate(node):
                    self.readers[arg.name].append(self.scopes[node.name])
        if output_readers is not None:
            for position, arg in enumerate(returned_here):
                if hasattr(arg, "name") and position < len(output_readers):
                    self.readers[arg.name].extend(output_readers[position])
        self.leaving = _leaving(self.scopes, self.readers, self.outputs)
        for node in delegates:
            program = getattr(graph_module, node.args[0].target).original_module
            positions: list[list[frozenset[str]]] = [[] for _ in returned_by[node.name]]
            for user in node.users:
                if user.target is operator.getitem and isinstance(user.args[1], int):
                    positions[user.args[1]] = self.readers.get(user.name, []) + (
                        [frozenset()] if user.name in self.outputs else []
                    )
            self.inner[node.name] = _Graph(program.graph_module, positions)

    def run(self, flat_inputs: list[Any], values: ModuleValues) -> Any:
        import torch

        facts = self

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n: Any) -> Any:
                if n.name in facts.inner:
                    program = getattr(facts.graph_module, n.args[0].target).original_module
                    args = [self.env[a] if hasattr(a, "name") else a for a in n.args[1:]]
                    result = facts.inner[n.name].run(_lifted_inputs(program, args), values)
                    result = tuple(result) if isinstance(result, (list, tuple)) else (result,)
                else:
                    result = super().run_node(n)
                if n.name in facts.leaving and isinstance(result, torch.Tensor):
                    kept = result.detach().clone()
                    for module in facts.leaving[n.name]:
                        values[module].append(kept)
                return result

        return Recorder(self.graph_module).run(*flat_inputs)


def fx_module_values(graph_module: Any, flat_inputs: list[Any]) -> ModuleValues:
    """Run ``graph_module`` on ``flat_inputs`` (its placeholders, in order) and keep each value that leaves a
    module's scope, under every module it leaves (inside ExecuTorch delegates too)."""
    import torch

    values: ModuleValues = defaultdict(list)
    with torch.no_grad():
        _Graph(graph_module).run(flat_inputs, values)
    return dict(values)


def _flat_user_inputs(program: Any, kwargs: Mapping[str, Any]) -> list[Any]:
    """The tensors an unlifted exported program's placeholders take, in its input spec's order."""
    import torch.utils._pytree as pytree
    from torch.export._tree_utils import reorder_kwargs

    spec = program.call_spec.in_spec
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return pytree.tree_leaves(((), reorder_kwargs(kwargs, spec)))


def exported_program_values(program: Any, kwargs: Mapping[str, Any]) -> ModuleValues:
    """Module values of an ``ExportedProgram`` (a loaded ``.pt2``, or an ExecuTorch program's
    executorch-dialect program) on the eager call's keyword arguments."""
    module = program.module()
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    flat = _flat_user_inputs(program, kwargs)
    if len(flat) != len(placeholders):
        raise LocaliseError(f"the program takes {len(placeholders)} inputs; the call gives {len(flat)} tensors")
    return fx_module_values(module, flat)


def executorch_program(program: Any) -> Any:
    """The executorch-dialect ``ExportedProgram`` of an ExecuTorch export (``ExecutorchProgramManager``, an
    ``EdgeProgramManager`` or the program itself)."""
    for attribute in ("exported_program",):
        getter = getattr(program, attribute, None)
        if callable(getter):
            return getter()
    if hasattr(program, "graph_module") and hasattr(program, "call_spec"):
        return program
    raise LocaliseError(f"no ExecuTorch program to run from a {type(program).__name__}")


# -- ONNX: a debug copy with the module-boundary values as graph outputs -----------------------------------


def _onnx_scopes(node: Any) -> frozenset[str]:
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return frozenset()
            return frozenset(s for s in scopes[:-1] if s)
    return frozenset()


def onnx_module_values(path: str | Path, kwargs: Mapping[str, Any]) -> ModuleValues:
    """Module values of the ONNX graph at ``path``: a debug copy lists every module-boundary value as a graph
    output and ONNX Runtime runs it on the call's tensors."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from .backend_runtime import INPUT_PREFIX, _strip
    from .naming import flat_named

    model = onnx.load(str(path), load_external_data=True)
    graph = model.graph
    scopes: dict[str, frozenset[str]] = {}
    readers: dict[str, list[frozenset[str]]] = defaultdict(list)
    for node in graph.node:
        node_scopes = _onnx_scopes(node)
        for value in node.output:
            scopes[value] = node_scopes
        for value in node.input:
            readers[value].append(node_scopes)
    outputs = {o.name for o in graph.output}
    leaving = _leaving(scopes, readers, outputs)
    typed = {v.name: v for v in (*graph.value_info, *graph.output)}
    if len(typed) < len(leaving):
        model = onnx.shape_inference.infer_shapes(model)
        typed.update({v.name: v for v in model.graph.value_info})
    extra = [name for name in leaving if name in typed and name not in outputs]
    model.graph.output.extend(typed[name] for name in extra)
    with tempfile.TemporaryDirectory(prefix="hfexport-localise-") as tmp:
        copy_path = Path(tmp) / "debug.onnx"
        onnx.save_model(model, str(copy_path), save_as_external_data=True, location="debug.onnx.data")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(copy_path), sess_options=options, providers=["CPUExecutionProvider"])
    names = {_strip(i.name, INPUT_PREFIX): i.name for i in session.get_inputs()}
    flat = flat_named(dict(kwargs))
    feed = {names[n]: np.ascontiguousarray(t.numpy()) for n, t in flat.items() if n in names}
    wanted = [o.name for o in session.get_outputs() if o.name in leaving]
    values: ModuleValues = defaultdict(list)
    for name, result in zip(wanted, session.run(wanted, feed)):
        tensor = torch.from_numpy(np.asarray(result).copy())
        for module in leaving[name]:
            values[module].append(tensor)
    return dict(values)


class LocaliseError(Exception):
    """The locator could not run the artifact's graph on the call (it then names no module and says why)."""

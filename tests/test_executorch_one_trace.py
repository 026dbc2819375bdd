"""The ExecuTorch exporter's one trace and the lowering retraces it lets hfexport skip
(``hfexport/executorch/speedups/retraces.py``) give the program EXIR gives without them.

The reference is EXIR's own way: torch.export's training-IR trace, lowered by ``to_edge_transform_and_lower``
with the skipping patches taken out of the lowering set, so every decomposition and metadata retrace runs. Both
sides go through the same hfexport stages otherwise. The programs must have the same ops outside the delegates,
byte-identical XNNPACK delegates, the same input writes, and the same outputs when run.

Faults, each made to fail a check here: a one trace without the table (the lowering then retraces again), a
decomposition skip that ignores what the program calls, a metadata-retrace skip that ignores a rewrite, and a
dim-order skip that ignores a tensor the portable kernel needs copied to the default dim order."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
import torch

pytest.importorskip("executorch")

from hfexport import ExecutorchConfig, ExecutorchExporter, HfExportError  # noqa: E402
import dataclasses  # noqa: E402
from hfexport.executorch.speedups import edge_pass_triggers
from hfexport.executorch.speedups import retraces as executorch_retraces  # noqa: E402
from hfexport.patching.registry import PATCHES, Patch  # noqa: E402

from helpers import eager, zoo_model  # noqa: E402

LOWERING = executorch_retraces.LOWERING


class TrainingIrExporter(ExecutorchExporter):
    """EXIR's way: the training-IR program (torch.export.export), decomposed by the lowering's retraces."""

    tracer = dataclasses.replace(ExecutorchExporter.tracer, decompositions=None)


class TracesWithoutTheTable(ExecutorchExporter):
    """Fault: the one trace keeps every composite op and applies none of the table (a functional ATen program
    that is not the decomposed one)."""

    tracer = dataclasses.replace(ExecutorchExporter.tracer, decompositions=lambda config: ({}, {}))


def without_skips(monkeypatch):
    """Take the retrace-skipping patches out of the lowering set for the test."""
    kept = [p for p in PATCHES[LOWERING] if p.factory.__module__ != executorch_retraces.__name__]
    assert len(kept) == len(PATCHES[LOWERING]) - 4
    monkeypatch.setitem(PATCHES, LOWERING, kept)


def replace_skip(monkeypatch, name, factory):
    """Swap the factory of the patch installed by ``executorch_retraces.<name>`` for a faulty one."""
    patches = [Patch(p.backend, p.path, factory, p.reason) if p.factory.__name__ == name else p
               for p in PATCHES[LOWERING]]
    assert patches != PATCHES[LOWERING]
    monkeypatch.setitem(PATCHES, LOWERING, patches)


def _shape(node):
    value = node.meta.get("val")
    return tuple(str(d) for d in value.shape) if isinstance(value, torch.Tensor) else None


def lowered(manager):
    """(ops outside the delegates, each delegate's graph as (op, output shape) in order, written inputs).
    Delegates are compared by graph, not bytes: their bytes number each node by its place in the whole program,
    which a retrace renumbers (the XNNPACK skip, which keeps the numbering, is compared by bytes below)."""
    program = manager.exported_program("forward")
    module = program.graph_module
    ops = Counter(str(n.target) for n in module.graph.nodes if n.op == "call_function")
    delegates = [[(str(n.target), _shape(n)) for n in getattr(module, d.target).original_module.graph.nodes
                  if n.op == "call_function"]
                 for d in module.graph.nodes if d.op == "get_attr" and d.target.startswith("lowered_module")]
    written = [s.target for s in program.graph_signature.output_specs if s.kind.name == "USER_INPUT_MUTATION"]
    return ops, delegates, written


def delegate_bytes(manager):
    module = manager.exported_program("forward").graph_module
    return [hashlib.sha1(getattr(module, n.target).processed_bytes).hexdigest()
            for n in module.graph.nodes if n.op == "get_attr" and n.target.startswith("lowered_module")]


def run(manager, inputs):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(manager.buffer).load_method("forward")
    return method.execute([v for v in inputs.values() if isinstance(v, torch.Tensor)])


def retraces_run(monkeypatch):
    """Records each decomposition retrace that runs, as (dialect, the program's user inputs): installed under the
    skipping patch (the lowering wraps the attribute it finds), so it sees only the calls the skip let through.
    The inputs tell the exported model's retraces from EXIR's own: the first lowering in a process also exports
    XNNPACK's pattern graphs (attention, bilinear upsampling) once, and decomposes them."""
    from torch.export import ExportedProgram

    ran = []
    original = ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        inputs = [s.arg.name for s in self.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        ran.append((self.verifier.dialect, inputs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counted)
    return ran


class RefusedLinear(torch.nn.Module):
    """A linear whose weight is an input: XNNPACK keeps ``aten.linear`` whole through the first decomposition,
    then refuses this one (its weight is not a constant), so the last retrace must decompose it."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x, w):
        return torch.nn.functional.linear(self.inner(x), w)


class ConvBlock(torch.nn.Module):
    """Ops that XNNPACK's passes rewrite (batch norm folded into a conv, a conv1d reshaped, activations fused,
    a concatenation) beside ones they leave alone."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)
        self.conv1d = torch.nn.Conv1d(4, 4, 1)
        self.linear = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.norm.running_mean.uniform_()
            self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x))).mean((2, 3))
        z = self.conv1d(y.unsqueeze(-1)).squeeze(-1)
        return torch.relu(self.linear(z)), torch.cat([y, z, y], -1)


def sample(name):
    torch.manual_seed(0)
    if name == "refused_linear":
        return RefusedLinear().eval(), {"x": torch.randn(2, 3, 4), "w": torch.randn(5, 4)}
    if name == "conv_block":
        return ConvBlock().eval(), {"x": torch.randn(2, 3, 8, 8)}
    entry, model = zoo_model(name)
    return model, entry.sample_inputs(model)


def first_output(value):
    return value[0] if isinstance(value, (tuple, dict)) else value  # a ModelOutput's first field that is set


CONFIG = ExecutorchConfig(dynamic=True)


@pytest.mark.parametrize("name", ["llama", "refused_linear", pytest.param("vit", marks=pytest.mark.hfexport_slow)])
def test_the_one_trace_and_the_skips_lower_to_exir_s_program(name, monkeypatch):
    model, inputs = sample(name)
    ours = ExecutorchExporter().export(model, inputs, CONFIG)
    without_skips(monkeypatch)
    reference = TrainingIrExporter().export(model, inputs, CONFIG)
    assert lowered(ours) == lowered(reference)
    got = run(ours, inputs)
    for value, expected in zip(got, run(reference, inputs), strict=True):
        torch.testing.assert_close(value, expected, rtol=0, atol=0)
    torch.testing.assert_close(got[0], first_output(eager(model, inputs)), atol=1e-4, rtol=1e-4)


def test_after_the_one_trace_the_lowering_retraces_nothing(monkeypatch):
    ran = retraces_run(monkeypatch)
    model, inputs = sample("llama")
    ExecutorchExporter().export(model, inputs, CONFIG)
    assert [r for r in ran if "input_ids" in r[1]] == []


def test_a_one_trace_without_the_table_is_told_apart_and_still_lowers_right(monkeypatch):
    """The fault costs time, not correctness: the skip sees the table's ops in the program and lets EXIR
    decompose them, and the retrace count above tells the fault apart."""
    ran = retraces_run(monkeypatch)
    model, inputs = sample("llama")
    manager = TracesWithoutTheTable().export(model, inputs, CONFIG)
    assert [r for r in ran if "input_ids" in r[1]], "the lowering skipped decomposing a program that needed it"
    torch.testing.assert_close(run(manager, inputs)[0], eager(model, inputs).logits, atol=1e-4, rtol=1e-4)


def skips_every_decomposition(original):
    """Fault: returns any ATen program as it is, whatever it calls."""

    def run_decompositions(self, decomp_table=None, *args, **kwargs):
        if decomp_table is not None and self.verifier.dialect == "ATEN":
            return self
        return original(self, decomp_table, *args, **kwargs)

    return run_decompositions


def test_a_decomposition_skip_that_ignores_what_the_program_calls_is_told_apart(monkeypatch):
    model, inputs = sample("refused_linear")
    with monkeypatch.context() as patched:
        without_skips(patched)
        reference = lowered(TrainingIrExporter().export(model, inputs, CONFIG))
    replace_skip(monkeypatch, "_run_decompositions_when_needed", skips_every_decomposition)
    assert lowered(ExecutorchExporter().export(model, inputs, CONFIG)) != reference


def counting(factory, counts):
    """``factory``'s ``ExportPass.call``, counting the calls that had a start recorded and those of them that
    still retraced."""

    def make(original):
        def reached(self, graph_module):
            counts["retraced"] += self.__dict__.get(executorch_retraces._GRAPH_AT_START) is not None
            return original(self, graph_module)

        inner = factory(reached)

        def call(self, graph_module):
            counts["recorded"] += self.__dict__.get(executorch_retraces._GRAPH_AT_START) is not None
            return inner(self, graph_module)

        return call

    return make


def test_the_metadata_retrace_skip_keeps_every_delegate_byte(monkeypatch):
    model, inputs = sample("conv_block")
    counts = Counter()
    replace_skip(monkeypatch, "_retrace_only_a_changed_graph",
                 counting(executorch_retraces._retrace_only_a_changed_graph, counts))
    ours = ExecutorchExporter().export(model, inputs, CONFIG)
    assert counts["retraced"] > 0, "no pass rewrote a graph: the check below would not see a wrong skip"
    assert counts["recorded"] - counts["retraced"] > 0, "nothing was skipped"
    monkeypatch.setitem(PATCHES, LOWERING, [p for p in PATCHES[LOWERING] if p.factory.__name__ not in
                                            ("_retrace_only_a_changed_graph", "_record_graph_at_start")])
    assert delegate_bytes(ours) == delegate_bytes(ExecutorchExporter().export(model, inputs, CONFIG))
    for got, expected in zip(run(ours, inputs), eager(model, inputs), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def skips_every_retrace(original):
    """Fault: skips the metadata retrace of every pass a start was recorded for, rewritten graph or not."""

    def call(self, graph_module):
        if self.__dict__.get(executorch_retraces._GRAPH_AT_START) is not None:
            from torch.fx.passes.infra.pass_base import PassResult

            return PassResult(graph_module, False)
        return original(self, graph_module)

    return call


def test_a_retrace_skip_that_ignores_a_rewrite_is_told_apart(monkeypatch):
    model, inputs = sample("conv_block")
    expected = delegate_bytes(ExecutorchExporter().export(model, inputs, CONFIG))
    replace_skip(monkeypatch, "_retrace_only_a_changed_graph", skips_every_retrace)
    try:
        got = delegate_bytes(ExecutorchExporter().export(model, inputs, CONFIG))
    except HfExportError as exc:  # the rewritten nodes have no metadata: EXIR refuses them
        got = str(exc)
    assert got != expected


def test_a_model_the_one_trace_refuses_is_lowered_from_the_training_ir(monkeypatch):
    """The fallback (shared with ONNX): the training-IR program is lowered, every retrace running."""
    from hfexport import decomposed_trace

    def refused(*args, **kwargs):
        raise AssertionError("one-pass refusal")

    monkeypatch.setattr(decomposed_trace, "export_decomposed", refused)
    ran = retraces_run(monkeypatch)
    model, inputs = sample("refused_linear")
    manager = ExecutorchExporter().export(model, inputs, CONFIG)
    assert ("TRAINING", ["x", "w"]) in ran
    torch.testing.assert_close(run(manager, inputs)[0], eager(model, inputs), atol=1e-5, rtol=1e-5)


class ChannelsLastMean(torch.nn.Module):
    """A mean over a channels-last tensor: the portable mean kernel needs the default dim order, so
    ``to_executorch``'s ``LegalizePortableDimOrderPass`` inserts a copy to it; its skip must not be taken here."""

    def forward(self, x):
        return x.to(memory_format=torch.channels_last).mean(dim=1)


PORTABLE = ExecutorchConfig(dynamic=False, backend="portable")


def dim_order_copies(manager):
    module = manager.exported_program("forward").graph_module
    return sum(n.op == "call_function" and "_to_dim_order_copy" in str(n.target) for n in module.graph.nodes)


DIM_ORDER_PASS = "executorch.exir.passes.legalize_portable_dim_order_pass.LegalizePortableDimOrderPass"


def recorded_dim_order_decisions(monkeypatch):
    decisions = []
    original = edge_pass_triggers.TRIGGERS[DIM_ORDER_PASS]

    def recorded(graph_module):
        decisions.append(original(graph_module))
        return decisions[-1]

    monkeypatch.setitem(edge_pass_triggers.TRIGGERS, DIM_ORDER_PASS, recorded)
    return decisions


def test_the_dim_order_skip_is_taken_only_where_nothing_needs_legalizing(monkeypatch):
    decisions = recorded_dim_order_decisions(monkeypatch)
    model, inputs = sample("llama")
    ExecutorchExporter().export(model, inputs, CONFIG)
    assert decisions == [False], "llama's means all read default-order tensors: the pass's retrace is skipped"

    decisions.clear()
    model, inputs = ChannelsLastMean(), {"x": torch.randn(2, 3, 4, 5)}
    ours = ExecutorchExporter().export(model, inputs, PORTABLE)
    assert decisions == [True]
    without_skips(monkeypatch)
    reference = ExecutorchExporter().export(model, inputs, PORTABLE)
    assert dim_order_copies(ours) == dim_order_copies(reference)  # the legalizing copy among them
    assert lowered(ours) == lowered(reference)
    torch.testing.assert_close(run(ours, inputs)[0], eager(model, inputs), atol=1e-6, rtol=1e-6)


def test_a_dim_order_skip_that_ignores_the_dim_order_is_told_apart(monkeypatch):
    model, inputs = ChannelsLastMean(), {"x": torch.randn(2, 3, 4, 5)}
    expected = dim_order_copies(ExecutorchExporter().export(model, inputs, PORTABLE))
    # Fault: the dim-order pass's trigger never fires, whatever the graph holds.
    monkeypatch.setitem(edge_pass_triggers.TRIGGERS, DIM_ORDER_PASS, lambda graph_module: False)
    assert dim_order_copies(ExecutorchExporter().export(model, inputs, PORTABLE)) == expected - 1  # no legalizing copy

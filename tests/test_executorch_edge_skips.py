"""The edge-pass retrace skip (``hfexport/executorch/speedups/edge_pass_triggers.py``) and the remembered pass-manager check
(``hfexport/executorch/checks.py``).

A trigger may only say "nothing to rewrite" where its pass, run for real, gives back the graph it was given. The
check runs each of EXIR's ATen-to-edge passes in ``to_edge``'s order over small programs built to need every pass
(and over llama's), and compares the trigger's word with what the pass did. Each trigger must also be seen firing
on a graph its pass rewrites, or the comparison would prove nothing about it; a trigger that never fires (the
fault ``never``) is caught there.

Whole lowered programs against EXIR's own, skips taken out, are compared in ``test_executorch_one_trace.py``.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

pytest.importorskip("executorch")

from hfexport import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.executorch import checks as executorch_checks
from hfexport.executorch.speedups import edge_pass_triggers  # noqa: E402
from hfexport.executorch.fixes import LOWERING  # noqa: E402
from hfexport.patching.registry import PATCHES  # noqa: E402

from helpers import zoo_model  # noqa: E402


class Rewritten(torch.nn.Module):
    """One op for each pass with a trigger: a plain transpose, a Python scalar and a symbolic size where the
    schema takes a tensor, mixed dtypes, a clone (memory format), a view op, and calls on constants."""

    def forward(self, x, n):
        y = x.t() * 2.0  # aten.t.default; mul.Tensor(y, 2.0)
        y = y * x.shape[0]  # mul.Tensor(y, sym_size)
        y = y + n  # add.Tensor(float, int64)
        z = y.clone(memory_format=torch.contiguous_format)
        return torch.ops.aten.alias.default(z).sum(0) + torch.ones(()) * 2  # calls on constants only


class ChannelsLastMean(torch.nn.Module):
    """A mean over a channels-last tensor: the dim-order pass copies its input to the default order."""

    def forward(self, x):
        return x.to(memory_format=torch.channels_last).mean(dim=1)


def _fingerprint(graph_module):
    """Every node's kind, target and arguments, nodes named by their place: a retrace renames nodes (names left
    free by an earlier pass's deletions are taken again), which is no rewrite."""
    out = []
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            place = {node: i for i, node in enumerate(module.graph.nodes)}
            ref = lambda n: f"%{place[n]}"  # noqa: E731
            out += [(n.op, str(n.target), str(torch.fx.node.map_arg(n.args, ref)),
                     str(torch.fx.node.map_arg(n.kwargs, ref))) for n in module.graph.nodes]
    return out


def _aten_program(model, inputs, dynamic):
    shapes = {name: {0: torch.export.Dim.AUTO} for name in inputs} if dynamic else None
    return torch.export.export(model, (), inputs, dynamic_shapes=shapes).run_decompositions({})


def _edge_passes():
    """``to_edge``'s ATen-to-edge passes, in its order (``_generate_edge_program``)."""
    from executorch.exir.passes import OpReplacePass
    from executorch.exir.passes.memory_format_ops_pass import MemoryFormatOpsPass
    from executorch.exir.passes.remove_graph_asserts_pass import RemoveNonCoreAtenOpGraphAssertsPass
    from executorch.exir.program._program import EdgeCompileConfig, _get_aten_to_edge_passes
    from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import ReplaceViewOpsWithViewCopyOpsPass

    pre, _ = _get_aten_to_edge_passes(EdgeCompileConfig())
    return [RemoveNonCoreAtenOpGraphAssertsPass(), ReplaceViewOpsWithViewCopyOpsPass(), *pre, OpReplacePass(),
            MemoryFormatOpsPass()]


def _pass_name(pass_):
    inner = getattr(pass_, "__wrapped__", None) or getattr(pass_, "fn", None) or pass_
    cls = inner if isinstance(inner, type) else type(inner)
    return f"{cls.__module__}.{cls.__qualname__}", inner


RUN_ON_THE_TRACE = ("NormalizeTransposePass", "ReplaceBrokenOpsWithFunctionalOpsPass")


def trigger_record(program, triggers):
    """Per listed pass, Counter of (trigger said, pass rewrote), each pass run on the graph as ``to_edge`` hands
    it over, after the passes before it. The view-copy pass takes every ``aten.t`` and view op first, so the two
    passes after it that rewrite those (``RUN_ON_THE_TRACE``) also run on the graph as traced."""
    record = {name: Counter() for name in triggers}

    def run(pass_, module):
        name, _ = _pass_name(pass_)
        said = triggers[name](module) if name in triggers else None
        before = _fingerprint(module)
        module = pass_(module).graph_module
        if said is not None:
            record[name][(said, _fingerprint(module) != before)] += 1
        return module

    with torch.no_grad():
        for pass_ in _edge_passes():
            name, inner = _pass_name(pass_)
            if name in triggers and name.rsplit(".", 1)[1] in RUN_ON_THE_TRACE:
                run(type(inner)(), copy.deepcopy(program.graph_module))
        module = program.graph_module
        for pass_ in _edge_passes():
            module = run(pass_, module)
        from executorch.exir.passes.const_prop_pass import ConstPropPass

        run(ConstPropPass(), module)  # XNNPACK's preprocess runs it on each partition, after to_edge
        from executorch.exir.passes.legalize_portable_dim_order_pass import LegalizePortableDimOrderPass

        from executorch.exir.passes.memory_format_ops_pass import DimOrderOpsRevertPass

        run(DimOrderOpsRevertPass(), copy.deepcopy(module))  # XNNPACK's preprocess, on each partition
        run(LegalizePortableDimOrderPass(), module)  # to_executorch runs it on the whole program
    return record


def programs():
    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)
    sample = {"x": torch.randn(3, 3), "n": torch.arange(3)}
    return [_aten_program(Rewritten(), sample, dynamic=False), _aten_program(Rewritten(), sample, dynamic=True),
            _aten_program(ChannelsLastMean(), {"x": torch.randn(2, 3, 4, 5)}, dynamic=False),
            _aten_program(model.eval(), inputs, dynamic=True)]


def violations_and_firings(triggers):
    """(passes whose trigger said "nothing" where the pass rewrote, passes never seen firing on a rewrite)."""
    total = {name: Counter() for name in triggers}
    for program in programs():
        for name, counts in trigger_record(program, triggers).items():
            total[name].update(counts)
    wrong = sorted(name for name, c in total.items() if c[(False, True)])
    unseen = sorted(name for name, c in total.items() if not c[(True, True)])
    return wrong, unseen


# The plain metadata retrace rewrites no graph; test_executorch_spec_refresh.py holds its trigger to the values.
REWRITING = {k: v for k, v in edge_pass_triggers.TRIGGERS.items() if k != edge_pass_triggers.METADATA_RETRACE}


def test_every_trigger_fires_where_its_pass_rewrites_and_never_misses_one():
    wrong, unseen = violations_and_firings(REWRITING)
    assert wrong == [], f"a trigger said 'nothing to rewrite' where its pass rewrote: {wrong}"
    assert unseen == [], f"no program here made these passes rewrite, so their triggers went untested: {unseen}"


def test_a_trigger_that_never_fires_is_caught():
    never = {name: (lambda graph_module: False) for name in REWRITING}
    wrong, _ = violations_and_firings(never)
    assert wrong == sorted(REWRITING)


def test_the_skip_is_taken_on_llama(caplog):
    entry, model = zoo_model("llama")
    with caplog.at_level("DEBUG", logger="hfexport.executorch.speedups.retraces"):
        ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    skipped = {r.getMessage().split()[0] for r in caplog.records if "nothing in the graph it rewrites" in r.getMessage()}
    expected = {"NormalizeTransposePass", "ReplaceBrokenOpsWithFunctionalOpsPass", "SymToTensorPass",
                "DimOrderOpsRevertPass", "ExportPass"}
    assert expected <= skipped


# -- the remembered check -------------------------------------------------------------------------------------


def _checked_program():
    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1

    from executorch.exir import to_edge

    return to_edge(torch.export.export(Add(), (torch.randn(2),))).exported_program()


def _check(program):
    from executorch.exir.pass_manager import ExportedProgramPassManager

    ExportedProgramPassManager([]).check(program)


def _rewrite_to_call_method(program):
    """A graph the check refuses: a ``call_method`` node outside a delegate."""
    graph = program.graph_module.graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        graph.call_method("clone", (output.args[0][0],))


def _rewrite_to_an_aten_call(program):
    """A graph the edge dialect's verifier refuses: an ATen operator where only edge operators may be."""
    graph = program.graph_module.graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        node = graph.call_function(torch.ops.aten.clone.default, (output.args[0][0],))
    node.meta["val"] = output.args[0][0].meta["val"]


def memo_verdict(monkeypatch, factory, validate=False):
    """(checks that reached EXIR's check, or the program's validation, for two asks about one state, whether the
    changed graph was refused)."""
    from executorch.exir.pass_manager import ExportedProgramPassManager
    from torch.export import ExportedProgram

    ran = []
    owner, name = (ExportedProgram, "_validate") if validate else (ExportedProgramPassManager, "check")
    original = getattr(owner, name)

    def counted(*args):
        ran.append(1)
        return original(*args)

    program = _checked_program()
    monkeypatch.setattr(owner, name, factory(counted))
    ask = program._validate if validate else lambda: _check(program)
    ask()
    ask()
    reached = len(ran)
    (_rewrite_to_an_aten_call if validate else _rewrite_to_call_method)(program)
    try:
        ask()
    except Exception as exc:  # noqa: BLE001 - EXIR raises its ExportError, torch its SpecViolationError
        return reached, ("is not an Edge operator" if validate else "call_method") in str(exc)
    return reached, False


def test_the_check_runs_once_per_state_and_again_after_a_change(monkeypatch):
    assert memo_verdict(monkeypatch, executorch_checks._check_each_state_once) == (1, True)


def test_the_validation_runs_once_per_state_and_again_after_a_change(monkeypatch):
    assert memo_verdict(monkeypatch, executorch_checks._validate_each_state_once, validate=True) == (1, True)


def remembers_the_module_only(original):
    """Fault: remembers a checked graph module whatever became of its graph."""
    seen = set()

    def check(*args):
        program = args[-1]  # (manager, program) for the check, (program,) for the validation
        if id(program.graph_module) in seen:
            return None
        original(*args)
        seen.add(id(program.graph_module))
        return None

    return check


@pytest.mark.parametrize("validate", [False, True], ids=["check", "validation"])
def test_a_memo_that_ignores_the_state_is_caught(monkeypatch, validate):
    reached, refused = memo_verdict(monkeypatch, remembers_the_module_only, validate)
    assert reached == 1 and not refused  # what the two tests above tell apart


def test_the_lowering_installs_the_remembered_check_and_validation():
    factories = {p.factory for p in PATCHES[LOWERING]}
    assert {executorch_checks._check_each_state_once, executorch_checks._validate_each_state_once} <= factories

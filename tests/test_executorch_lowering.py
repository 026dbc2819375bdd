"""ExecuTorch lowering cases: dynamic dims the delegate must keep, size functions from deferred asserts, a batch the
trace pins, XNNPACK's layout question, and a plan that could not load here."""

from __future__ import annotations

import dataclasses
import functools

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

pytest.importorskip("executorch")

from conformance.zoo import get  # noqa: E402
from hfexport import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.errors import HfExportError, RunnerInputError  # noqa: E402
from hfexport.tracing import Trace  # noqa: E402
from hfexport.model_state import diff_model_state, snapshot_model  # noqa: E402
from hfexport.outputs import flatten_named  # noqa: E402
from hfexport import dim_bounds  # noqa: E402
from hfexport import runtime  # noqa: E402
from hfexport.executorch.runtime import ExecutorchDecodeLoop, ExecutorchRunner  # noqa: E402
from pytest_hfexport.compare import compare  # noqa: E402
from executorch_artifacts import (  # noqa: E402,F401
    ATOL, MAX_CACHE_LEN, NEW_TOKENS, REPO, _ref, _tiny_sample, export_zoo, shared_artifact, shared_dir,
)


class TopProbability(torch.nn.Module):
    """SwitchTransformers' router output: the top probability per token, unsqueezed back to [batch, seq, 1]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.classifier = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(self.classifier(x).softmax(-1), dim=-1).values.unsqueeze(-1) * x


def test_an_unsqueeze_with_two_dynamic_dims_lowers_and_matches():
    model = TopProbability().eval()
    program = ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))
    for sample in (_tiny_sample(), _tiny_sample(batch=3, seq=5)):
        got = ExecutorchRunner(program)(sample)
        with torch.no_grad():
            torch.testing.assert_close(next(iter(flatten_named(got).values())), model(**sample), atol=1e-5, rtol=1e-4)


def test_without_the_partitioner_check_xnnpack_refuses_the_unsqueeze(monkeypatch):
    from hfexport.patching import PATCHES
    from hfexport.executorch.fixes import LOWERING

    monkeypatch.setitem(PATCHES, LOWERING, [p for p in PATCHES[LOWERING] if "UnsqueezeCopyConfig" not in p.path])
    with pytest.raises(HfExportError, match="only supports 1 dynamic dimension"):
        ExecutorchExporter().export(TopProbability().eval(), _tiny_sample(), ExecutorchConfig(dynamic=True))


def _bert_with_explicit_ranges() -> tuple[Any, dict, ExecutorchConfig]:
    """BERT exported as the guide configures explicit ranges: Dim(min, max) and deferred run-time asserts, which
    leave a torch.sym_min (its position_ids slice) in the program."""
    entry = get("bert")
    model = entry.model()
    sample = entry.sample_inputs(model)
    length = sample["input_ids"].shape[1]
    seq = torch.export.Dim("seq", min=2, max=length + 5)
    spec = {k: {1: seq} for k, v in sample.items() if isinstance(v, torch.Tensor) and v.dim() == 2}
    config = ExecutorchConfig(dynamic_shapes=spec, prefer_deferred_runtime_asserts_over_guards=True)
    return model, sample, config


def test_size_functions_from_deferred_asserts_lower_and_match_eager():
    model, sample, config = _bert_with_explicit_ranges()
    runner = runtime.runner_for(ExecutorchExporter().export(model, sample, config), "executorch")
    with torch.no_grad():
        expected = flatten_named(model(**sample))
    assert compare(expected, runner(**sample), "executorch").ok


def test_without_the_edge_config_entry_the_size_functions_fail_lowering(monkeypatch):
    """The fault twin: EXIR's default edge config refuses torch.sym_min as an edge op."""
    from executorch.exir import EdgeCompileConfig

    from hfexport.executorch import fixes as executorch_fixes

    model, sample, config = _bert_with_explicit_ranges()
    monkeypatch.setattr(executorch_fixes, "edge_compile_config", lambda program: EdgeCompileConfig())
    with pytest.raises(HfExportError, match="to_edge_transform_and_lower"):
        ExecutorchExporter().export(model, sample, config)


class _PinsBatchOne(torch.nn.Module):
    """Branches on a batch of 1 (as Funnel's pooling does): a batch-1 trace guards the batch to 1."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids) * attention_mask[..., None]
        if hidden.shape[0] == 1:
            hidden = hidden[0][None]  # the same values: only the trace tells the branches apart
        return hidden.sum(-1)


def _traced_batches(monkeypatch):
    """The batch of ``input_ids`` in every torch.export trace of the model (XNNPACK's own pattern graphs aside)."""
    import torch.export._trace as export_trace

    batches = []
    original = export_trace._export

    @functools.wraps(original)
    def counted(mod, args, kwargs=None, *rest, **options):
        if isinstance(kwargs, dict) and "input_ids" in kwargs:
            batches.append(kwargs["input_ids"].shape[0])
        return original(mod, args, kwargs, *rest, **options)

    monkeypatch.setattr(export_trace, "_export", counted)
    return batches


def test_a_batch_one_trace_that_pins_the_tied_batch_is_opened_by_the_batch_retrace(monkeypatch):
    """The ExecuTorch exporter ties the token inputs' batch axes to one named Dim; a trace that pins it raised
    'Constraints violated (batch)' (Funnel). It is traced again from batch 2, the batch still tied, and opened to
    batch 1: the batch-1 trace that failed and the batch-2 one, no third (neither a two-pass retry at batch 1, which
    pins the batch the same way, nor one with free axes at batch 1, which cost Funnel 6.6 s before the batch-2
    trace it needed anyway)."""
    from executorch.runtime import Runtime

    batches = _traced_batches(monkeypatch)
    model = _PinsBatchOne().eval()
    ids = torch.randint(0, 16, (1, 5))
    manager = ExecutorchExporter().export(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                          ExecutorchConfig(dynamic=True))
    assert batches == [1, 2]
    program = manager.exported_program("forward")
    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    batch = {str(n.meta["val"].shape[0]) for n in program.graph.nodes if n.op == "placeholder" and n.name in users}
    assert len(batch) == 1, f"the batch axes are no longer tied: {batch}"
    method = Runtime.get().load_program(manager.buffer).load_method("forward")
    for wide in (torch.randint(0, 16, (3, 7)), ids):
        (got,) = method.execute([wide, torch.ones_like(wide)])
        torch.testing.assert_close(got, model(wide, torch.ones_like(wide)))


class _UntiesFirstTrace(Trace):
    """Fault: where the tied trace pins the batch, traces at batch 1 with free axes before the batch-2 retrace."""

    def export_once(self, model, graph_inputs, dynamic_shapes, config, plan):
        try:
            return self.export_checked(model, graph_inputs, dynamic_shapes, config)
        except HfExportError as exc:
            if "Constraints violated (batch)" not in str(exc):
                raise
        free = plan.free(graph_inputs)
        return self.export_checked(model, graph_inputs, free, config)


class _UntiesFirst(ExecutorchExporter):
    tracer = _UntiesFirstTrace(**{f.name: getattr(ExecutorchExporter.tracer, f.name)
                                  for f in dataclasses.fields(ExecutorchExporter.tracer)})


def test_a_tied_batch_fallback_through_free_axes_is_told_apart(monkeypatch):
    batches = _traced_batches(monkeypatch)
    ids = torch.randint(0, 16, (1, 5))
    _UntiesFirst().export(_PinsBatchOne().eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                          ExecutorchConfig(dynamic=True))
    assert batches == [1, 1, 2]  # the test above requires [1, 2]


def _layout_question(is_nhwc_tensor):
    """(the answer, guards and replacements the question added) for a [batch, 3, 1, 1] tensor expanded from one
    row (batch stride 0), its batch symbolic with hint 1 as in a size-oblivious batch-1 trace: dense in either
    layout only at batch 1."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    shape_env = ShapeEnv(specialize_zero_one=False)
    symbol = shape_env.create_symbol(1, source=ConstantSource("batch"), dynamic_dim=DimDynamic.DYNAMIC)
    with FakeTensorMode(shape_env=shape_env):
        value = torch.empty_strided((shape_env.create_symintnode(symbol, hint=1), 3, 1, 1), (0, 1, 1, 1))
    answer = is_nhwc_tensor(value)
    return answer, len(shape_env.guards) + len(shape_env.replacements)


def test_xnnpack_s_layout_question_is_answered_without_pinning_the_batch():
    """XNNPACK's layout pass asked is_contiguous() of such a tensor, which guards batch == 1; the lowering then
    sized Qwen2-VL's tensors for batch 1 (its position planes overran their memory plan). hfexport's patch
    answers from what holds at every size."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import (
        ChannelsLastTaggedReshapePass,
    )

    from hfexport.executorch import fixes as executorch_fixes

    original = ChannelsLastTaggedReshapePass._is_nhwc_tensor
    assert _layout_question(executorch_fixes._layout_read_without_guards(original)) == (False, 0)
    answer, guards = _layout_question(original)  # the fault: XNNPACK's own question
    assert guards > 0


def test_qwen2_vl_s_lowered_logits_keep_the_batch_symbol():
    """Before the layout patch they came out [1, seq, vocab], the batch pinned by XNNPACK's layout question."""
    from helpers import zoo_model

    entry, model = zoo_model("qwen2_vl")
    manager = ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    program = manager.exported_program("forward")
    (logits, *_) = next(n for n in program.graph.nodes if n.op == "output").args[0]
    assert isinstance(logits.meta["val"].shape[0], torch.SymInt), logits.meta["val"].shape


class _TanhGelu(torch.nn.Module):
    """As transformers' GELUTanh: F.gelu bound at construction, out of reach of a patch of the attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.act = functools.partial(torch.nn.functional.gelu, approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def test_tanh_gelu_matches_eager(tmp_path):
    """XNNPACK's own tanh-GELU kernel is 4.7e-4 off torch's on these inputs; the export writes the formula out
    (executorch.fixes: a fix of the traced program, since transformers binds F.gelu at construction), which is float32 rounding off. 2e-6: twice the 4.8e-7 measured, on values to 9."""
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0)) * 3
    program = ExecutorchExporter().export(_TanhGelu(), {"x": x}, ExecutorchConfig())
    ExecutorchExporter.save(program, str(tmp_path / "gelu.pte"))
    got = next(iter(flatten_named(runtime.load(str(tmp_path / "gelu.pte"))(x=x)).values()))
    assert float((got - _TanhGelu()(x)).abs().max()) < 2e-6


def test_a_plan_that_cannot_load_here_is_refused_at_export():
    """A program whose planned activations exceed the limit (default: this machine's memory) is refused at
    export with the plan's size and the bounds to lower, not written as a .pte that fails to load with 0x21;
    the model is left as it was. The limit is lowered here to below the tiny model's plan."""
    entry = get("llama")
    model = entry.model()
    before = snapshot_model(model)
    exporter = ExecutorchExporter(max_planned_memory=1024)
    with pytest.raises(HfExportError, match=r"GiB of activations .* max_batch=8, max_length=2048") as raised:
        exporter.export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    assert raised.value.stage == "lowering"
    assert diff_model_state(model, before) == []
    assert dim_bounds.physical_memory() > 2**30  # the default limit, which every other export here passes under

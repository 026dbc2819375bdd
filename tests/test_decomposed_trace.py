"""The ONNX exporter's one trace records the graph that torch.export's trace plus torch.onnx's decomposition
retrace record, op for op (up to the differences ``SAME_OP`` and ``SHAPE_READS`` name), with the same input
writes; and faulty one-pass traces are told apart.

The reference here is built the way torch.onnx builds it (``ExportedProgram.run_decompositions`` with the ONNX
table, size-obliviously), around the same hfexport trace stages, so the only difference is the one trace."""

from collections import Counter

import pytest
import torch

import dataclasses

from hfexport import OnnxConfig, OnnxExporter
from hfexport import onnx as onnx_exporter
from hfexport.tracing import Trace

from helpers import eager, tiny_llama, zoo_model


def with_trace(**changes):
    """OnnxExporter with its trace stage changed."""

    class Changed(OnnxExporter):
        tracer = dataclasses.replace(OnnxExporter.tracer, **changes)

    return Changed


def _decomposed_as_torch_onnx_does(program, config):
    from torch.onnx._internal.exporter import _fx_passes

    registry = onnx_exporter.registry_for(onnx_exporter.resolve_opset(config.opset_version))
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        return _fx_passes.decompose_with_registry(program, registry)


# torch.export's training IR, then torch.onnx's decomposition pass over it: what the one trace replaces.
TwoTrace = with_trace(decompositions=None, after_training_ir=_decomposed_as_torch_onnx_does)
def _keeps_no_composite_ops(config):
    return {}, dict(onnx_exporter.decomposition_table(config)[1])


def _skips_the_table(config):
    return dict(onnx_exporter.decomposition_table(config)[0]), {}


# Fault: the one trace decomposes every composite op (attention included), as if nothing were translated.
KeepsNoCompositeOps = with_trace(decompositions=_keeps_no_composite_ops)
KeepsNoCompositeOps.__name__ = "KeepsNoCompositeOps"
# Fault: the one trace keeps the composite ops but applies none of the table's other decompositions.
SkipsTheTable = with_trace(decompositions=_skips_the_table)
SkipsTheTable.__name__ = "SkipsTheTable"


# Checks torch.onnx removes before translating (``_fx_passes.remove_assertion_nodes``): the post-dispatch trace
# records dtype checks of the sample's tensors that the retrace of a training-IR program does not.
ASSERTIONS = {"aten.sym_constrain_range_for_size.default", "aten._assert_async.default", "aten._assert_async.msg",
              "aten._assert_scalar.default", "aten._assert_tensor_metadata.default"}


# Where the two IRs differ by design, not by content: an output that aliases another value is an ``alias`` in the
# post-dispatch trace and a ``clone`` after the retrace (both an Identity in ONNX), and the retrace re-derives which
# symbolic sizes it reads (T5's relative positions read one size more in the one trace: six shape nodes in ONNX).
SAME_OP = {"aten.alias.default": "aten.clone.default"}
SHAPE_READS = {"aten.sym_size.int"}


def ops(program) -> Counter:
    return Counter(SAME_OP.get(str(n.target), str(n.target)) for n in program.graph.nodes
                   if n.op == "call_function" and str(n.target) not in ASSERTIONS | SHAPE_READS)


def written_inputs(program) -> list[str]:
    return [s.target for s in program.graph_signature.output_specs if s.kind.name == "USER_INPUT_MUTATION"]


def llama_decode_step():
    """A tiny Llama's decode step given the prompt's DynamicCache (the program writes into it)."""
    model, inputs = tiny_llama(2)
    with torch.no_grad():
        past = model(**inputs, use_cache=True).past_key_values
    return model, {"input_ids": torch.randint(0, 64, (2, 1)), "attention_mask": torch.ones(2, 6, dtype=torch.long),
                   "past_key_values": past}


def zoo_sample(name):
    entry, model = zoo_model(name)
    return model, entry.sample_inputs(model)


CASES = {"llama": lambda: zoo_sample("llama"), "t5": lambda: zoo_sample("t5"), "bert": lambda: zoo_sample("bert"),
         "llama_decode_step": llama_decode_step}


def traced(exporter_cls, model, inputs):
    return exporter_cls().trace(model, inputs, OnnxConfig(dynamic=True))


@pytest.mark.parametrize("case", CASES)
def test_one_trace_records_the_graph_of_trace_plus_decompositions(case):
    model, inputs = CASES[case]()
    reference = traced(TwoTrace, model, inputs)
    one = traced(OnnxExporter, model, inputs)
    assert ops(one) == ops(reference)
    assert written_inputs(one) == written_inputs(reference)


def test_the_one_trace_keeps_attention_whole_for_hfexport_s_translation():
    """The ONNX translation of SDPA is hfexport's (MatMul/Softmax): the op must reach it whole."""
    model, inputs = zoo_sample("llama")
    assert ops(traced(OnnxExporter, model, inputs))["aten.scaled_dot_product_attention.default"] == 2


@pytest.mark.parametrize("fault", [KeepsNoCompositeOps, SkipsTheTable], ids=lambda f: f.__name__)
def test_a_faulty_one_pass_trace_is_told_apart(fault):
    model, inputs = zoo_sample("llama")
    reference = traced(TwoTrace, model, inputs)
    assert ops(traced(fault, model, inputs)) != ops(reference)


def test_the_exported_onnx_program_matches_eager_and_torch_state_comes_back():
    import torch.export._trace as export_trace

    before = export_trace._export_to_aten_ir
    sdpa_kernels = dict(torch.ops.aten.scaled_dot_product_attention.default.py_kernels)
    model, inputs = zoo_sample("llama")
    program = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    assert export_trace._export_to_aten_ir is before
    assert dict(torch.ops.aten.scaled_dot_product_attention.default.py_kernels) == sdpa_kernels
    import onnxruntime as ort

    session = ort.InferenceSession(program.model_proto.SerializeToString())
    feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    logits = session.run(["logits"], feeds)[0]
    torch.testing.assert_close(torch.from_numpy(logits), eager(model, inputs).logits, atol=1e-4, rtol=1e-4)


class _SetsAttributesAsItRuns(torch.nn.Module):
    """Counts its forwards on itself: a trace that fails half-way leaves the count raised."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.linear(x).transpose(0, 1).reshape(-1)


def test_a_model_the_one_trace_refuses_is_traced_in_two_passes_from_its_own_state(monkeypatch):
    """torch's constraint solver refused DeepSeek-V4's decode step in the one trace and not in two; here the
    refusal is simulated after the forward ran. The two-pass trace starts from the model as it was, and its
    program is the decomposed one the one trace would give."""
    from hfexport import decomposed_trace

    seen_calls = []
    one_pass = decomposed_trace.export_decomposed

    def refused(model, *args, **kwargs):
        one_pass(model, *args, **kwargs)
        raise AssertionError("Did not expect constraint with no free variables: False")

    monkeypatch.setattr(decomposed_trace, "export_decomposed", refused)
    model = _SetsAttributesAsItRuns().eval()
    model.register_forward_pre_hook(lambda module, args: seen_calls.append(module.calls))
    x = torch.randn(2, 4)
    program = OnnxExporter().export(model, {"x": x}, OnnxConfig(dynamic=True))
    assert len(seen_calls) >= 2 and set(seen_calls) == {0}, f"a trace ran on a state a trace left: {seen_calls}"
    assert model.calls == 0
    import onnxruntime as ort

    session = ort.InferenceSession(program.model_proto.SerializeToString())
    (got,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), eager(model, {"x": x}))


def test_an_error_of_both_ways_is_the_two_pass_error(monkeypatch):
    from hfexport import HfExportError, decomposed_trace

    def refused(*args, **kwargs):
        raise AssertionError("one-pass refusal")

    monkeypatch.setattr(decomposed_trace, "export_decomposed", refused)
    monkeypatch.setattr(Trace, "training_ir", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("two")))
    with pytest.raises(HfExportError, match="RuntimeError: two"):
        OnnxExporter().export(_SetsAttributesAsItRuns().eval(), {"x": torch.randn(2, 4)}, OnnxConfig(dynamic=True))

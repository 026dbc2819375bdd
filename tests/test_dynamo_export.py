"""DynamoExporter on tiny models: exact against eager at the sample shape and at other shapes."""

import pytest
import torch
from torch.export import Dim

from hfexport import DynamoConfig, DynamoExporter, HfExportError

from helpers import assert_matches, eager, zoo_model

ATOL = 1e-5


@pytest.fixture(scope="module")
def exported():
    cache = {}

    def get(name):
        if name not in cache:
            entry, model = zoo_model(name)
            sample = entry.sample_inputs(model)
            cache[name] = (entry, model, DynamoExporter().export(model, sample, DynamoConfig(dynamic=True)))
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt2", "bert", "vit"])
def test_dynamic_export_matches_eager_at_sample_and_other_shapes(exported, name):
    entry, model, program = exported(name)
    assert isinstance(program, torch.export.ExportedProgram)
    module = program.module()
    for inputs in (entry.sample_inputs(model), entry.input_sets(model, ("batch",))["batch"]):
        assert_matches(eager(model, inputs), module(**inputs), "dynamo", tolerance=ATOL)


@pytest.mark.parametrize("batch, seq", [(1, 1), (3, 1), (4, 11)])
def test_batch_one_sample_does_not_pin_batch_or_sequence(exported, batch, seq):
    entry, model, program = exported("llama")
    assert entry.sample[0] == 1
    inputs = entry.sample_inputs(model, batch=batch, seq=seq)
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=ATOL)


def test_static_export_pins_the_sample_shape():
    entry, model = zoo_model("bert")
    program = DynamoExporter().export(model, entry.sample_inputs(model), DynamoConfig())
    assert not program.range_constraints  # nothing symbolic
    with pytest.raises(Exception):
        program.module()(**entry.input_sets(model, ("batch",))["batch"])


def test_explicit_dynamic_shapes_pass_through_unchanged():
    entry, model = zoo_model("qwen3")
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    config = DynamoConfig(dynamic_shapes=shapes)
    program = DynamoExporter().export(model, entry.sample_inputs(model), config)
    assert config.dynamic_shapes is shapes
    ranges = sorted((int(vr.lower), int(vr.upper)) for vr in program.range_constraints.values())
    assert ranges == [(1, 8), (1, 64)]
    inputs = entry.sample_inputs(model, batch=3, seq=10)
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=ATOL)


@pytest.mark.parametrize("impl", ["flash_attention_2", "flex_attention"])
def test_flash_and_flex_attention_get_a_clear_error(impl):
    entry, model = zoo_model("llama")
    model.config._attn_implementation = impl
    with pytest.raises(ValueError, match=r"'sdpa'.*'eager'"):
        DynamoExporter().export(model, entry.sample_inputs(model), DynamoConfig(dynamic=True))
    assert model.config._attn_implementation == impl


def test_non_tensor_inputs_are_bound_as_constants():
    entry, model = zoo_model("llama")
    inputs = {**entry.sample_inputs(model), "use_cache": False}
    program = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
    names = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    assert names == ["input_ids", "attention_mask"]
    out = program.module()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert out.get("past_key_values") is None  # use_cache=False was honoured


def test_export_failure_names_the_stage_and_what_to_try():
    class Bad(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent branch: torch.export refuses it
                return x + 1
            return x - 1

    with pytest.raises(HfExportError, match="Try:") as info:
        DynamoExporter().export(Bad(), {"x": torch.randn(2, 3)}, DynamoConfig())
    assert info.value.stage == "export"


def test_bad_sample_inputs_are_refused():
    entry, model = zoo_model("bert")
    with pytest.raises(TypeError, match="dict of named inputs"):
        DynamoExporter().export(model, [1, 2], None)
    with pytest.raises(ValueError, match="no tensor"):
        DynamoExporter().export(model, {"use_cache": False}, None)


def test_stack_traces_are_captured_only_when_asked():
    """Capturing a Python stack per node slows every export (docs/performance.md); ``stack_traces=True`` keeps them."""
    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)

    def from_model_source(program):  # (torch's own size asserts carry a trace of their own either way)
        return [n.name for n in program.graph.nodes if "modeling_llama.py" in (n.meta.get("stack_trace") or "")]

    assert from_model_source(DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))) == []
    kept = from_model_source(DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True, stack_traces=True)))
    assert len(kept) > 20


class _BranchesOnData(torch.nn.Module):
    def forward(self, input_ids):
        if input_ids.sum() > 3:  # the line an export error must name
            return input_ids * 2
        return input_ids


def test_an_export_error_names_the_source_line_without_stack_traces():
    with pytest.raises(HfExportError, match="the line an export error must name"):
        DynamoExporter().export(_BranchesOnData(), {"input_ids": torch.ones(2, 3)}, DynamoConfig(dynamic=True))

"""pytest_hfexport.strategies: shared sizes, Dim specs containing the sample, token inputs, runtime shapes."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_hfexport import strategies
from pytest_hfexport.adapters import resolve
from pytest_hfexport.pipeline import Harness


class Config:
    vocab_size = 50


@settings(max_examples=10, deadline=None)
@given(strategies.sizes(1, 3, 2, 5))
def test_sizes_are_within_bounds(sizes):
    assert 1 <= sizes["batch"] <= 3 and 2 <= sizes["seq"] <= 5


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_dim_specs_contain_the_sample_and_share_axes(data):
    sample = {"input_ids": torch.zeros(2, 7, dtype=torch.long), "attention_mask": torch.ones(2, 7), "flag": True}
    spec = data.draw(strategies.dim_specs(sample))
    batch, seq = spec["input_ids"][0], spec["input_ids"][1]
    assert spec["attention_mask"][0] is batch and spec["attention_mask"][1] is seq  # one Dim per axis, shared
    assert batch.min <= 2 <= batch.max and seq.min <= 7 <= seq.max
    assert spec["flag"] is None


@settings(max_examples=10, deadline=None)
@given(strategies.token_inputs(Config(), batch=st.integers(1, 3), seq=st.integers(1, 6)))
def test_token_inputs_are_valid_for_the_config(inputs):
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.shape == mask.shape and ids.dtype == torch.long
    assert int(ids.min()) >= 0 and int(ids.max()) < Config.vocab_size
    assert bool((mask.sum(1) >= 1).all())  # every row keeps a real token
    assert bool((mask.diff(dim=1) >= 0).all())  # left padding only


class Pair(torch.nn.Module):
    """Uses its inputs independently: the graph has no reason to tie their sizes together."""

    def forward(self, input_ids, attention_mask):
        return {"ids": input_ids + 1, "mask": attention_mask * 2}


@pytest.fixture(scope="module")
def program():
    sample = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    spec = {"input_ids": {0: torch.export.Dim("b", min=1, max=6), 1: torch.export.Dim("s", min=2, max=9)},
            "attention_mask": {0: torch.export.Dim("b2", min=1, max=4), 1: torch.export.Dim("s2", min=2, max=9)}}
    harness = Harness(resolve("hfexport"), "dynamo")
    return harness.export_and_compare(Pair(), sample, from_disk=False, dynamic_shapes=spec).program, sample


def test_runtime_shapes_stay_inside_the_declared_ranges(program):
    prog, sample = program
    seen = set()

    @settings(max_examples=15, deadline=None, database=None)
    @given(strategies.runtime_shapes(prog))
    def check(shapes):
        b, s = shapes["input_ids"]
        assert shapes["attention_mask"] == [b, s]  # tied: equal in the example, drawn together
        assert 1 <= b <= 4 and 2 <= s <= 9  # the intersection of both inputs' ranges
        seen.add((b, s))

    check()
    assert len(seen) > 1


def test_runtime_inputs_run_on_the_exported_program(program):
    prog, sample = program
    from hfexport.runtime import runner_for

    run = runner_for(prog, "dynamo")

    @settings(max_examples=5, deadline=None, database=None)
    @given(strategies.runtime_inputs(prog, sample))
    def check(inputs):
        out = run(inputs)
        assert torch.equal(out["ids"], inputs["input_ids"] + 1) and torch.equal(out["mask"], inputs["attention_mask"] * 2)

    check()

"""Small shared helpers for the unit tests: zoo models, comparisons."""

from __future__ import annotations

import torch

from conformance.zoo import get
from hfexport.outputs import flatten_named


def zoo_model(name: str):
    entry = get(name)
    model = entry.model()
    return entry, model


def max_error(reference, candidate) -> float:
    ref, got = flatten_named(reference), flatten_named(candidate)
    assert set(ref) == set(got), f"output names differ: {sorted(set(ref) ^ set(got))}"
    worst = 0.0
    for name in ref:
        assert ref[name].shape == got[name].shape, f"{name}: {tuple(got[name].shape)} != {tuple(ref[name].shape)}"
        worst = max(worst, (ref[name].double() - got[name].double()).abs().max().item())
    return worst


def eager(model, inputs):
    with torch.no_grad():
        return model(**inputs)

"""Small shared helpers for the unit tests: zoo models, eager runs, and asserting outputs match eager.

The comparison is the repository's one verdict engine, ``pytest_hfexport.compare.compare``; this module
only names the tensors (``pytest_hfexport.naming.flat_named``) and asserts its verdict.
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.zoo import get
from pytest_hfexport.compare import ToleranceSpec, compare
from pytest_hfexport.naming import flat_named


def zoo_model(name: str):
    entry = get(name)
    model = entry.model()
    return entry, model


def assert_matches(reference: Any, candidate: Any, backend: str, *, tolerance: ToleranceSpec = None,
                   label: str = "sample", ordered: bool = False) -> None:
    """``candidate`` has exactly ``reference``'s outputs (same names, shapes and dtype kinds), each within
    ``tolerance`` (default: the backend's per-dtype bar). Either side may be a structured model output or an
    already flat ``{name: tensor}`` dict; ``ordered`` also requires the names in the same order."""
    expected, got = flat_named(reference), flat_named(candidate)
    if ordered:
        assert list(got) == list(expected), f"output names differ: {list(got)} != {list(expected)}"
    result = compare(expected, got, backend, tolerance=tolerance, label=label, strict_names=True)
    assert result.ok, result.message()


def eager(model, inputs):
    with torch.no_grad():
        return model(**inputs)

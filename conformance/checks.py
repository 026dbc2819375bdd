"""Small helpers the check files share: eager reference, comparison, assertion."""

from __future__ import annotations

import copy
from typing import Any, Mapping

import torch

from hfexport.outputs import flatten_named
from pytest_hfexport.compare import compare


def eager_named(module: Any, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return flatten_named(module(**copy.deepcopy(dict(inputs))))


def assert_matches(reference: Mapping[str, Any], got: Mapping[str, Any], backend: str, label: str) -> float:
    result = compare(reference, got, backend, label=label)
    assert result.ok, result.message()
    return result.max_abs

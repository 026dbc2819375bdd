"""The suite's one way to judge an artifact's outputs: eager reference vs artifact, by flat name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_hfexport.backend_runtime import backend_runner
from pytest_hfexport.compare import compare
from pytest_hfexport.naming import flat_named
from pytest_hfexport.reference import graph_kwargs, reference_call


def assert_matches(module: Any, call: Mapping[str, Any], runner: Any, backend: str, label: str) -> float:
    """Run the artifact on the tensor arguments of ``call`` and compare with ``module`` run eagerly on all of
    them; returns the largest absolute error."""
    import copy

    expected = reference_call(module, call)
    given = copy.deepcopy(graph_kwargs(call))
    got = flat_named(runner(**given))
    assert_inputs_kept(graph_kwargs(call), given, label)
    result = compare(expected, got, backend, label=label)
    assert result.ok, result.message()
    return result.max_abs


def assert_inputs_kept(original: Mapping[str, Any], given: Mapping[str, Any], label: str) -> None:
    """A runner reads the caller's tensors and leaves them as they were (a cache object it is handed is its
    to update, as eager's own forward does)."""
    import torch

    changed = [
        name
        for name, value in given.items()
        if isinstance(value, torch.Tensor)
        and not (value.dtype == original[name].dtype and torch.equal(value, original[name]))
    ]
    assert not changed, f"the runner changed the caller's input tensor(s) {changed} in place ({label})"


def assert_backend_file_matches(module: Any, call: Mapping[str, Any], path: Any, backend: str, label: str) -> None:
    """The backend file at ``path``, run by the backend's own runtime, matches ``module`` run eagerly on every
    output both name (eager's first output, the logits or hidden states, must be among them)."""
    import copy

    expected = reference_call(module, call)
    got = backend_runner(path, backend, list(expected))(**copy.deepcopy(graph_kwargs(call)))
    first = next(iter(expected))
    assert first in got, (
        f"the backend's own runtime gave no {first!r} output for the {label} (it gave {sorted(got)[:8]})"
    )
    result = compare(
        {k: v for k, v in expected.items() if k in got}, got, backend, label=f"{label}, {backend}'s own runtime"
    )
    assert result.ok, result.message()

"""The suite's one way to judge an artifact's outputs: eager reference vs artifact, by flat name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_hfexport.compare import ToleranceSpec, compare
from pytest_hfexport.localise import Artifact, locate
from pytest_hfexport.naming import flat_named
from pytest_hfexport.reference import graph_kwargs, reference_call


def assert_matches(
    module: Any,
    call: Mapping[str, Any],
    runner: Any,
    backend: str,
    label: str,
    *,
    backend_file: bool = False,
    artifact: Artifact | None = None,
    tolerance: ToleranceSpec = None,
) -> float:
    """Run the artifact on the tensor arguments of ``call`` and compare with ``module`` run eagerly on all of
    them; returns the largest absolute error. The runner must leave the tensors it is handed as they were.

    ``backend_file=True``: ``runner`` is the backend's own runtime over the raw file
    (``pytest_hfexport.backend_runtime``), which names outputs its own way or not at all: the outputs both
    sides name are compared (unnamed ones take eager's names in order when the counts agree, else only the
    first), and eager's first output (logits, hidden states) must be among them.

    ``artifact``: on a mismatch, the locator (``pytest_hfexport.localise``) names the first module of ``module``
    whose output the artifact computes differently, in the message (and the test's report row).

    ``tolerance``: a measured tolerance other than the backend's float32 one (a quantized artifact's own)."""
    import copy

    expected = reference_call(module, call)
    given = copy.deepcopy(graph_kwargs(call))
    out = runner(**given)
    assert_inputs_kept(graph_kwargs(call), given, label)
    if backend_file:
        names = list(expected)
        got = dict(zip(names if len(out) == len(names) else names[:1], out)) if isinstance(out, list) else out
        assert names[0] in got, (
            f"the backend's own runtime gave no {names[0]!r} output ({label}; it gave {sorted(got)[:8]})"
        )
        expected = {k: v for k, v in expected.items() if k in got}
        label = f"{label}, {backend}'s own runtime"
    else:
        got = flat_named(out)
    result = compare(expected, got, backend, tolerance=tolerance, label=label)
    if not result.ok:
        found = locate(module, call, backend, artifact, tolerance=tolerance) if artifact is not None else None
        raise AssertionError(result.message() + (f"\n{found.describe()}" if found is not None else ""))
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

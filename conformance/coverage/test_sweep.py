"""The coverage sweep: one test per architecture x backend x check (``conformance.coverage.collect``).

Collected only when asked: ``pytest conformance/coverage`` or ``--coverage-sweep types|all`` (docs/coverage.md).
A failure is the implementation's: the stage and first line of what went wrong (``cells.CellFailure``). An
architecture the suite cannot build tiny skips as ``not buildable``; a declared gap of the adapter skips as
``unsupported``; nothing else skips.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.coverage.build import NotBuildable
from conformance.coverage.cells import judge_export, judge_generation


def test_export(
    architecture: Any,
    built: Any,
    hfexport_implementation: Any,
    hfexport_backend: str,
    hfexport_device: str,
    hfexport_artifact_cache: Any,
    tmp_path: Any,
    time_limit: Any,
) -> None:
    """The plain dynamic export matches eager at the batch-1 sample and at batch 2 x another length."""
    with time_limit():
        model = built(architecture)
        judge_export(
            hfexport_implementation, hfexport_backend, hfexport_device, model, tmp_path, hfexport_artifact_cache
        )


def test_generation(
    architecture: Any,
    built: Any,
    hfexport_implementation: Any,
    hfexport_backend: str,
    hfexport_artifact_cache: Any,
    tmp_path: Any,
    time_limit: Any,
) -> None:
    """The generation components, served inside the model's own generate(), give eager's greedy tokens."""
    with time_limit():
        model = built(architecture)
        try:
            judge_generation(hfexport_implementation, hfexport_backend, model, tmp_path, hfexport_artifact_cache)
        except NotBuildable as exc:  # eager generate() itself fails: the suite has no tokens to judge against
            pytest.skip(f"not buildable: {exc.stage}: {exc.reason}")

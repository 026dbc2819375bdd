"""pytest_hfexport: a pytest plugin to assert exportability and gate version upgrades.

Importing this package is cheap (no torch): the public names below load on first use.

    from pytest_hfexport import parametrize_with_checks, ModelCase

    @parametrize_with_checks([ModelCase("tiny", build_model, make_inputs)])
    def test_exportable(check):
        check()
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "parametrize_with_checks": "pytest_hfexport.downstream",
    "ModelCase": "pytest_hfexport.downstream",
    "CHECKS": "pytest_hfexport.downstream",
    "Tolerance": "pytest_hfexport.compare",
    "CompareResult": "pytest_hfexport.compare",
    "ExportMismatch": "pytest_hfexport.pipeline",
    "Measurement": "pytest_hfexport.pipeline",
    "default_tolerance": "pytest_hfexport.compare",
    "ExportCheckError": "pytest_hfexport.pipeline",
    "Unsupported": "pytest_hfexport.adapters.base",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_hfexport' has no attribute {name!r}")

"""Imported once by the worker pool's fork server, so every worker starts with the heavy modules loaded.

A fresh interpreter spends seconds importing torch, transformers, the ONNX stack and the
implementation; forking from a server that imported them once makes a worker start in
milliseconds. The only tensor work is ``warm``'s, with one intra-op thread (no thread pool exists
before the fork). The implementation is imported through the plugin's adapter (``COVERAGE_IMPL``), never by name.
"""

from __future__ import annotations

import contextlib
import importlib
import os

from .quiet import silence_python

silence_python()

for _name in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "torch.onnx", "executorch.exir"):
    with contextlib.suppress(Exception):
        importlib.import_module(_name)

with contextlib.suppress(Exception):
    import pytest_hfexport.pipeline  # noqa: F401
    import pytest_hfexport.serving  # noqa: F401
    from pytest_hfexport.adapters import resolve

    resolve(os.environ.get("COVERAGE_IMPL", "hfexport"))

from .warm import warm_from_environment  # noqa: E402 (after the imports it warms)

warm_from_environment(os.environ.get("COVERAGE_IMPL", "hfexport"))

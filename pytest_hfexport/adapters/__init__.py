"""Which implementation of the export API is under test: ``--hfexport-impl`` -> an ``Adapter``.

``hfexport`` (default) and dotted modules with hfexport's API go through ``ModuleAdapter``;
``transformers`` (``transformers.exporters``, the peer) through ``TransformersAdapter``. A module
that defines ``hfexport_adapter`` (an ``Adapter`` subclass) brings its own.
"""

from __future__ import annotations

import importlib
import importlib.util

from .base import CAPABILITIES, UNSUPPORTED_PREFIX, Adapter, DecodeLoop, Runner, Unsupported

__all__ = ["Adapter", "CAPABILITIES", "DecodeLoop", "Runner", "UNSUPPORTED_PREFIX", "Unsupported", "exists", "resolve"]


def _module_name(name: str) -> str:
    return "transformers.exporters" if name == "transformers" else name


def exists(name: str) -> bool:
    """Whether ``--hfexport-impl`` names something importable (found, not imported)."""
    try:
        return importlib.util.find_spec(_module_name(name)) is not None
    except (ImportError, ValueError):
        return False


def resolve(name: str) -> Adapter:
    """The adapter for ``--hfexport-impl`` (imports the implementation now)."""
    if name == "transformers":
        from .transformers import TransformersAdapter

        return TransformersAdapter()
    module = importlib.import_module(name)
    custom = getattr(module, "hfexport_adapter", None)
    if isinstance(custom, type) and issubclass(custom, Adapter):
        return custom()
    from .module import ModuleAdapter

    return ModuleAdapter(name)

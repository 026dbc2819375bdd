"""``export --check`` and the judge's own commands (``explain``) come from a judge, found by entry point.

The library imports nothing of the plugin that judges it: ``pytest_hfexport`` (installed with hfexport)
registers its checker in the entry-point group ``hfexport.checkers`` (``pyproject.toml``). A checker is a
module with ``check_all(args, model, inputs, generation_config, dynamic, paths, progress) -> list[dict]``,
``format_check(result) -> str`` and ``TOLERANCE`` (backend -> float32 atol).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from .errors import usage_error

GROUP = "hfexport.checkers"
NAME = "export-check"
# Whole commands a judge adds to ``hfexport`` (``hfexport explain``): a module with ``HELP``, ``DESCRIPTION``,
# ``add_arguments(parser)``, ``run(args, progress) -> (exit code, result dict)`` and ``format_result(result)``.
COMMAND_GROUP = "hfexport.commands"


def commands() -> dict[str, Any]:
    """The commands judges registered, by name (loaded: their modules import nothing heavy at import)."""
    found: dict[str, Any] = {}
    for ep in importlib.metadata.entry_points(group=COMMAND_GROUP):
        try:
            found.setdefault(ep.name, ep.load())
        except ImportError:  # a judge installed without its dependencies adds no command; hfexport still runs
            continue
    return found


def checker() -> Any:
    """The registered checker module; a usage error naming what to install when there is none."""
    found = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == NAME]
    if not found:
        raise usage_error(
            f"--check needs a checker, and none is registered (entry-point group {GROUP!r}, name {NAME!r}). "
            "pytest_hfexport, installed with hfexport, registers one: reinstall hfexport "
            "(pip install -e . from a clone) so its entry points are recorded.",
        )
    return found[0].load()

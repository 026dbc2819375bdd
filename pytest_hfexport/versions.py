"""Installed versions against the pins, without importing torch.

The pins and their parser live in ``hfexport.environment``. Importing ``hfexport`` imports
torch, so this module loads ``hfexport/environment.py`` on its own (it needs only the
standard library) unless ``hfexport`` is already imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from types import ModuleType


@cache
def environment() -> ModuleType:
    if "hfexport.environment" in sys.modules:
        return sys.modules["hfexport.environment"]
    spec = importlib.util.find_spec("hfexport")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pytest_hfexport needs the hfexport package (pip install hfexport)")
    path = Path(list(spec.submodule_search_locations)[0]) / "environment.py"
    module_spec = importlib.util.spec_from_file_location("_pytest_hfexport_environment", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up while the file runs
    module_spec.loader.exec_module(module)
    return module


def read_pins(path: str | Path | None = None) -> dict[str, str]:
    return environment().read_pins(path)


def strip_local(version: str) -> str:
    return version.split("+", 1)[0]


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_versions(names: Iterable[str]) -> dict[str, str | None]:
    return {n: installed(n) for n in names}


def drift(pins: Mapping[str, str], names: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
    """name -> (pinned, installed) for every pinned package (of ``names``) not installed at its pin."""
    out = {}
    for name in pins if names is None else names:
        name = name.lower()
        if name not in pins:
            continue
        got = installed(name)
        if got is None or strip_local(got) != pins[name]:
            out[name] = (pins[name], got)
    return out


def outside(ranges: Mapping[str, str]) -> dict[str, tuple[str, str | None]]:
    """name -> (specifier, installed) for every package whose installed version is outside its range."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    out = {}
    for name, spec in ranges.items():
        got = installed(name.replace("_", "-")) or installed(name)
        if got is None or Version(strip_local(got)) not in SpecifierSet(spec):
            out[name] = (spec, got)
    return out

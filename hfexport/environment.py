"""Installed versions against the pins: the one source of truth for tested versions.

The pins are the files in ``hfexport/pins/``; pyproject.toml installs from the
same files, so what we test and what we install cannot drift apart.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import re
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PINS_DIR = Path(__file__).parent / "pins"

# Import name -> distribution name, where they differ.
DISTRIBUTION_NAMES = {"onnxruntime": "onnxruntime", "executorch": "executorch", "pytest_xdist": "pytest-xdist"}
# Distribution -> the extra of hfexport that installs it, for install hints.
EXTRA_FOR = {"onnx": "onnx", "onnxscript": "onnx", "onnxruntime": "onnx", "executorch": "executorch"}


def read_pins(path: str | Path | None = None) -> dict[str, str]:
    """Read ``name==version`` lines from one pins file, or from every shipped pins file."""
    files = [Path(path)] if path is not None else sorted(PINS_DIR.glob("*.txt"))
    pins: dict[str, str] = {}
    for file in files:
        for raw in file.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)", line)
            if not m:
                raise ValueError(f"{file}: pin line {raw!r} is not of the form name==version")
            pins[m.group(1).lower()] = m.group(2)
    return pins


def strip_local(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': local build tags are not a different release."""
    return version.split("+", 1)[0]


def installed_version(package: str) -> str | None:
    """The installed distribution version, or None when it is not installed."""
    dist = DISTRIBUTION_NAMES.get(package, package)
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def version_tuple(version: str) -> tuple:
    from packaging.version import Version

    return Version(strip_local(version)).release


def install_hint(package: str) -> str:
    pins = read_pins()
    dist = DISTRIBUTION_NAMES.get(package, package)
    spec = f"{dist}=={pins[dist]}" if dist in pins else dist
    extra = EXTRA_FOR.get(dist)
    hint = f"pip install '{spec}'"
    if extra:
        hint += f" (or pip install 'hfexport[{extra}]')"
    return hint


@dataclass(frozen=True)
class PackageStatus:
    name: str
    pinned: str | None
    installed: str | None

    @property
    def drift(self) -> bool:
        return self.pinned is not None and self.installed is not None and strip_local(self.installed) != self.pinned

    @property
    def missing(self) -> bool:
        return self.installed is None


def environment_report(pins: dict[str, str] | None = None) -> list[PackageStatus]:
    """Every pinned package with its installed version; used by the CLI, the plugin header and reports."""
    pins = read_pins() if pins is None else pins
    return [PackageStatus(name, pinned, installed_version(name)) for name, pinned in pins.items()]


def installed_versions(names: list[str] | None = None) -> dict[str, str | None]:
    names = list(read_pins()) if names is None else names
    return {n: installed_version(n) for n in names}

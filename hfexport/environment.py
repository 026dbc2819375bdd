"""Installed versions against the pinned stack and the tested window.

Two files in ``hfexport/pins/`` say which releases hfexport works with:

* ``window.toml``: the tested window (lowest and highest release per package), the install ranges
  pip sees (``requires-*.txt`` are written from it: ``make requirements``),
  and the stacks ``make compat`` runs. Outside the window hfexport warns and names it; it never refuses.
* ``constraints.txt``: the pinned stack, exact releases: what the repository's own set-up installs
  with and what the plugin's header marks ``DRIFT`` against.

Standard library only: the plugin loads this file without importing torch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PINS_DIR = Path(__file__).parent / "pins"
CONSTRAINTS = PINS_DIR / "constraints.txt"
WINDOW = PINS_DIR / "window.toml"
# The extras of hfexport, in the order pyproject.toml lists them; "core" is the plain install.
EXTRAS = ("core", "onnx", "executorch", "test", "dev")

# Import name -> distribution name, where they differ.
DISTRIBUTION_NAMES = {"onnxruntime": "onnxruntime", "executorch": "executorch", "pytest_xdist": "pytest-xdist"}
# Distribution -> the extra of hfexport that installs it, for install hints.
EXTRA_FOR = {"onnx": "onnx", "onnxscript": "onnx", "onnxruntime": "onnx", "executorch": "executorch"}


def read_pins(path: str | Path | None = None) -> dict[str, str]:
    """Read ``name==version`` lines from a pins file (default: the pinned stack, ``constraints.txt``)."""
    files = [Path(path) if path is not None else CONSTRAINTS]
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


def holds(when: str | None) -> bool:
    """Does every requirement of ``when`` ("onnxscript<0.7", several joined by ";") hold for what is installed?

    The version condition of a registry entry (a patch or fix that answers one upstream release's behaviour):
    None holds everywhere; a package that is not installed does not satisfy a condition on it.
    """
    if when is None:
        return True
    from packaging.requirements import Requirement

    for part in (p.strip() for p in when.split(";") if p.strip()):
        requirement = Requirement(part)
        installed = installed_version(requirement.name)
        if installed is None or not requirement.specifier.contains(strip_local(installed), prereleases=True):
            return False
    return True


def is_importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def version_tuple(version: str) -> tuple:
    from packaging.version import Version

    return Version(strip_local(version)).release


def install_hint(package: str) -> str:
    window = read_window()["packages"]
    dist = DISTRIBUTION_NAMES.get(package, package)
    spec = f"{dist}{window[dist]['install']}" if dist in window else dist
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


# -- the tested window --------------------------------------------------------------------------------------------


@cache
def read_window(path: str | Path | None = None) -> dict[str, Any]:
    """``window.toml``, checked: every package has a two-release window inside its install range."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    file = Path(path) if path is not None else WINDOW
    data = tomllib.loads(file.read_text())
    for name, entry in data.get("packages", {}).items():
        low, high = entry["window"]
        if Version(low) > Version(high):
            raise ValueError(f"{file}: {name}'s window {low}..{high} is reversed")
        if entry.get("extra") not in EXTRAS:
            raise ValueError(f"{file}: {name}'s extra {entry.get('extra')!r} is not one of {EXTRAS}")
        for end in (low, high):
            if Version(end) not in SpecifierSet(entry["install"]):
                raise ValueError(f"{file}: {name} {end} is in the window but outside install {entry['install']!r}")
    for stack, releases in data.get("stacks", {}).items():
        for name, version in releases.items():
            if not in_window(name, version, data):
                raise ValueError(f"{file}: stack {stack!r} takes {name} {version}, outside the window")
    return data


def in_window(package: str, version: str, window: dict[str, Any] | None = None) -> bool:
    """Is ``version`` of ``package`` inside the tested window (the releases between its two ends)? A package the
    window does not name is inside."""
    from packaging.version import Version

    entry = (window or read_window())["packages"].get(package)
    if entry is None:
        return True
    low, high = entry["window"]
    return Version(low) <= Version(strip_local(version)) <= Version(high)


def window_text(package: str) -> str:
    low, high = read_window()["packages"][package]["window"]
    return f"{package} {low} to {high}"


def outside_window(packages: list[str] | None = None) -> dict[str, str]:
    """name -> installed version, for every installed package of the window (of ``packages``) outside it."""
    names = list(read_window()["packages"]) if packages is None else packages
    out = {}
    for name in names:
        version = installed_version(name)
        if version is not None and not in_window(name, version):
            out[name] = version
    return out


def requirement_lines(extra: str) -> list[str]:
    """The install requirements of one extra, as pip reads them, written from the window."""
    packages = read_window()["packages"]
    return [f"{name}{entry['install']}" for name, entry in packages.items() if entry["extra"] == extra]


def requirements_file(extra: str) -> Path:
    return PINS_DIR / f"requires-{extra}.txt"


def requirements_text(extra: str) -> str:
    return (
        "# Written from window.toml by `make requirements` (environment.write_requirements); edit window.toml.\n"
        + "".join(f"{line}\n" for line in requirement_lines(extra))
    )


def write_requirements() -> list[Path]:
    """(Re)write ``requires-<extra>.txt`` for every extra; pyproject.toml installs from them."""
    written = []
    for extra in EXTRAS:
        path = requirements_file(extra)
        path.write_text(requirements_text(extra))
        written.append(path)
    return written

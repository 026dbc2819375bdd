"""Which architectures the suite cannot build tiny: the committed build verdicts, ``docs/reports/coverage/builds.json``.

Building is the suite's work, not the implementation's, and its verdict depends only on the suite's shrinker and
inputs (``SWEEP_VERSION``) on the installed torch and transformers. A verdict of those same versions spares the
collection every build attempt of an architecture that cannot be built: no test is generated for it, and the
count is printed in the session header. A verdict of other versions is ignored (the architecture is collected
and its build tried inside each test, which then reports ``not buildable`` as a skip with the reason).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

# Bump when shrinking, inputs or checks change what a verdict means.
SWEEP_VERSION = "3"
BUILD_PACKAGES = ("torch", "transformers")
DEFAULT_VERDICTS = Path(__file__).resolve().parents[2] / "docs" / "reports" / "coverage" / "builds.json"


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_versions() -> dict[str, Any]:
    """The versions a build verdict holds under: torch, transformers and the sweep's own version."""
    return {**{name: package_version(name) for name in BUILD_PACKAGES}, "sweep": SWEEP_VERSION}


def load_verdicts(path: Path = DEFAULT_VERDICTS) -> dict[str, dict[str, Any]]:
    """``arch|head`` -> {stage, message, versions}: every committed verdict, whatever its versions."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}  # no file, or a damaged one: every architecture is collected and built in its test
    return data if isinstance(data, dict) else {}


def current_verdicts(path: Path = DEFAULT_VERDICTS) -> dict[str, dict[str, Any]]:
    """The committed verdicts that hold for the installed versions."""
    versions = build_versions()
    return {key: v for key, v in load_verdicts(path).items() if v.get("versions") == versions}

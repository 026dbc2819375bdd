"""DIR/hfexport.json, the record of an export: its name, atomic writes, reading it back, JSON encoding."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import usage_error

MANIFEST = "hfexport.json"


def json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write JSON beside its final name, then rename: readers never see half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, default=json_default)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_manifest(folder: Path) -> dict[str, Any]:
    """``folder``'s hfexport.json, or ``{}`` where there is none; a usage error where it is not JSON."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise usage_error(f"{path} is not valid JSON ({exc}); export again") from exc


def versions() -> dict[str, Any]:
    """hfexport, Python and the installed versions of the pinned packages, for the manifest."""
    import platform

    from .. import __version__
    from ..environment import installed_versions

    return {"hfexport": __version__, "python": platform.python_version(), **installed_versions()}

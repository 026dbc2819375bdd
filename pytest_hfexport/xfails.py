"""Known failures: a TOML or JSON file of ``key = reason``, applied as strict xfails.

Keys are either a test id (anything with ``::``: a full node id, or its tail such as
``test_models.py::test_export[onnx]``) or a structured ``model/backend/check`` where each
part may be an ``fnmatch`` pattern (``llama/executorch/*``). Values are the reason (a string),
or a table with ``reason`` and, for a failure of some releases only, ``when`` (requirement specifiers such as
``"transformers>=5.25"``, several joined by ``;``: the entry applies where every one holds for the
installed release, so one file serves every stack of the tested window). Entries may sit at the top level or
under ``[xfail]``.
An entry that matches a test makes it xfail strictly (a pass then fails the run, XPASS(strict));
an entry that matches no collected test is warned about.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class XfailFileError(ValueError):
    pass


def load(path: str | Path) -> dict[str, str]:
    path = Path(path)
    if not path.exists():
        raise XfailFileError(f"known-failures file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except Exception as exc:
        raise XfailFileError(f"{path}: cannot parse known failures: {exc}") from exc
    return normalise(data, str(path))


def normalise(data: Any, source: str = "xfails") -> dict[str, str]:
    if isinstance(data, Mapping) and set(data) <= {"xfail", "xfails"} and data:
        data = data.get("xfail", data.get("xfails"))
    if not isinstance(data, Mapping):
        raise XfailFileError(f"{source}: expected a table of key = reason")
    out: dict[str, str] = {}
    for key, value in data.items():
        reason = value.get("reason") if isinstance(value, Mapping) else value
        if not isinstance(reason, str) or not reason.strip():
            raise XfailFileError(f"{source}: entry {key!r} needs a reason (a non-empty string)")
        when = value.get("when") if isinstance(value, Mapping) else None
        if when is not None and not _holds(str(when), f"{source}: entry {key!r}"):
            continue
        if "::" not in key and len(key.split("/")) != 3:
            raise XfailFileError(f"{source}: key {key!r} is neither a test id (with '::') nor 'model/backend/check'")
        out[str(key)] = reason
    return out


def _holds(when: str, where: str) -> bool:
    """Every ``name<spec>`` of ``when`` holds for the installed release (a package not installed: it does not)."""
    import importlib.metadata

    from packaging.requirements import InvalidRequirement, Requirement

    for part in (p.strip() for p in when.split(";")):
        try:
            requirement = Requirement(part)
        except InvalidRequirement as exc:
            raise XfailFileError(f"{where}: when = {when!r}: {exc}") from None
        try:
            installed = importlib.metadata.version(requirement.name).split("+", 1)[0]
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(installed, prereleases=True):
            return False
    return True


def matches(key: str, nodeid: str, identity: tuple[str, str, str] | None) -> bool:
    if "::" in key:
        return nodeid == key or nodeid.endswith("/" + key) or (key.startswith("::") and nodeid.endswith(key))
    if identity is None:
        return False
    return all(fnmatch.fnmatchcase(part, pattern) for part, pattern in zip(identity, key.split("/")))


def find(entries: Mapping[str, str], nodeid: str, identity: tuple[str, str, str] | None) -> tuple[str, str] | None:
    for key, reason in entries.items():
        if matches(key, nodeid, identity):
            return key, reason
    return None

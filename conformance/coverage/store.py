"""The sweep's results on disk: one JSON file per implementation, one record per cell, each with the versions
it was measured under.

A cell is ``architecture|head|backend``. A record is reused by a later sweep only when its versions
equal the current ones (torch, transformers, onnx, onnxscript, onnxruntime, executorch, the
implementation's version, and the sweep's own version, bumped whenever what a cell measures
changes); anything else is measured again. The implementation's source revision (git commit plus a
digest of uncommitted changes, where it lives in a checkout) is stored with each record and shown in
the report, but does not invalidate it: a full sweep takes several budgeted runs, and commits in
between must not restart it (``--fresh`` does). Writes go to a temporary file first, so
an interrupted sweep leaves the last complete file behind, and resumes from it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
from pathlib import Path
from typing import Any

# Bump when shrinking, inputs or checks change what a stored cell means.
SWEEP_VERSION = "3"
PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch")
DEFAULT_DIR = Path("out/coverage")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def source_revision(path: str | None) -> str | None:
    """The git commit of the repository holding ``path`` plus a digest of its uncommitted changes there
    (so a sweep after an edit measures again); None outside a git checkout."""
    if not path:
        return None
    file = Path(path).resolve()
    folder = file.parent
    try:
        # Only a file git tracks has a revision (a package installed in a virtualenv inside a checkout has none).
        subprocess.run(
            ["git", "ls-files", "--error-unmatch", file.name], cwd=folder, capture_output=True, timeout=10, check=True
        )
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        diff = subprocess.run(
            ["git", "diff", "HEAD", "--", "."], cwd=folder, capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return head + (f"+{hashlib.sha1(diff.encode()).hexdigest()[:8]}" if diff else "")


def current_versions(impl: str, impl_version: str) -> dict[str, Any]:
    versions: dict[str, Any] = {name: package_version(name) for name in PACKAGES}
    versions.update(impl=impl, impl_version=impl_version, sweep=SWEEP_VERSION)
    return versions


def cell_key(arch: str, head: str, backend: str) -> str:
    return f"{arch}|{head}|{backend}"


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` through a temporary file, so a reader (or an interrupted sweep) only ever sees
    a complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


class Store:
    """``out/coverage/<impl>.json``: {"impl", "runs": [...], "cells": {key: record}}."""

    def __init__(self, path: Path, impl: str) -> None:
        self.path = Path(path)
        self.impl = impl
        self.data: dict[str, Any] = {"impl": impl, "runs": [], "cells": {}}
        if self.path.exists():
            loaded = json.loads(self.path.read_text())
            if loaded.get("impl") == impl:
                self.data = loaded
        self.data.setdefault("runs", [])
        self.data.setdefault("cells", {})

    @property
    def cells(self) -> dict[str, dict[str, Any]]:
        return self.data["cells"]

    def reusable(self, key: str, versions: dict[str, Any]) -> dict[str, Any] | None:
        """The stored record of ``key`` when it was measured under exactly ``versions``."""
        record = self.cells.get(key)
        return record if record is not None and record.get("versions") == versions else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        self.cells[key] = record

    def merge_seed(self, seed: Path, versions: dict[str, Any]) -> int:
        """Take the cells of a committed sweep (``seed``: a store file of the same implementation) that this store
        lacks and that were measured under ``versions`` (a cell of other versions stays out: it would be measured
        again, and a budgeted sweep that never reaches it must not report it), each marked with where it came
        from, and that sweep's runs. Returns how many cells were taken."""
        data = load(seed)
        if data is None or data.get("impl") != self.impl:
            return 0
        taken = 0
        for key, record in data.get("cells", {}).items():
            if key not in self.cells and record.get("versions") == versions:
                self.cells[key] = {**record, "seeded_from": str(seed)}
                taken += 1
        if taken:
            known = {(r.get("started"), r.get("command")) for r in self.data["runs"]}
            seeded_runs = [
                {**r, "seeded_from": str(seed)}
                for r in data.get("runs", [])
                if (r.get("started"), r.get("command")) not in known
            ]
            self.data["runs"] = sorted(self.data["runs"] + seeded_runs, key=lambda r: r.get("started") or "")
        return taken

    def save(self) -> None:
        write_json(self.path, self.data)


# What decides whether an architecture builds: the suite's own shrinker and inputs (``SWEEP_VERSION``) on
# these packages. The implementation under test plays no part, so one sweep's verdict serves the other's.
BUILD_PACKAGES = ("torch", "transformers")


def build_versions() -> dict[str, Any]:
    return {**{name: package_version(name) for name in BUILD_PACKAGES}, "sweep": SWEEP_VERSION}


class BuildVerdicts:
    """``out/coverage/builds.json``: the architectures a sweep found not buildable, with the stage and reason.

    Building is the suite's work, not the implementation's, so a later sweep (the other implementation's, or
    a resumed one) records these cells from here instead of paying the build attempt again. Only verdicts
    of the build itself are kept (a worker killed or crashed while building says nothing certain), and only
    under the same ``build_versions()``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.data = {}  # a damaged file only costs the build attempts it would have saved

    def get(self, arch: str, head: str, versions: dict[str, Any]) -> dict[str, Any] | None:
        verdict = self.data.get(f"{arch}|{head}")
        return verdict if verdict is not None and verdict.get("versions") == versions else None

    def put(self, arch: str, head: str, verdict: dict[str, Any]) -> None:
        self.data[f"{arch}|{head}"] = verdict

    def merge_seed(self, seed: Path) -> int:
        """Take the verdicts of a committed sweep's ``builds.json`` that this file lacks (``get`` still checks
        their versions); returns how many."""
        data = load(seed) or {}
        fresh = {key: verdict for key, verdict in data.items() if key not in self.data}
        self.data.update(fresh)
        return len(fresh)

    def save(self) -> None:
        write_json(self.path, self.data)


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(Path(path).read_text()) if Path(path).exists() else None

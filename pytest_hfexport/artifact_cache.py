"""Saved artifacts reused across sessions: an export whose inputs have not changed is not exported again.

Exporting dominates the plugin's and the suite's time (ExecuTorch lowering costs tens of seconds per graph),
yet between two runs on an unchanged tree every export is the same. An entry is keyed by everything an
export depends on:

* the model: its class, its config (JSON), a digest of every parameter and buffer, its generation config;
* the sample inputs: names, shapes, dtypes and a digest of their values;
* the export: backend, the export config (as the implementation serialises it), what is exported (the plain
  model, or ``export_for_generation`` and its options);
* the implementation: its name, version and a digest of its source files (and of the adapter's), so an edit
  to the exporter is a new key; and its own environment variables (``<NAME>_*``, e.g. ``HFEXPORT_SPEEDUPS``,
  which turns hfexport's speed-ups off: an artifact exported with them must not answer a run without them);
* the installed versions of torch, transformers, onnx, onnxscript, onnxruntime and executorch.

A hit gives the saved files back; every check still loads them and runs them against eager, so the cache
saves exporting, never judging. Failed exports are not stored: they run again.

Safe under pytest-xdist: one writer per key (a file lock), entries written into a staging folder and
renamed into place with a manifest of every file's size and SHA-256, written last. An entry whose
manifest is missing or unreadable, or whose files do not match it, is discarded with a warning and exported
again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MANIFEST = "hfexport-cache.json"
FORMAT = 1  # bump when the manifest or the key's contents change meaning
VERSIONED = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch")


class ArtifactCacheWarning(UserWarning):
    """A cache entry was unreadable or did not match its manifest and was discarded."""


@dataclass(frozen=True)
class CacheHit:
    """Artifacts served from the cache: component name -> saved path (inside the entry's folder)."""

    key: str
    paths: dict[str, Path]


# -- the key -------------------------------------------------------------------------------------------------


def _digest_tensor(h: Any, tensor: Any) -> None:
    import torch

    t = tensor.detach().cpu().contiguous()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def describe(value: Any) -> Any:
    """A JSON-able description of ``value`` that changes when anything an export depends on changes."""
    import torch

    if isinstance(value, torch.Tensor):
        h = hashlib.sha256()
        _digest_tensor(h, value)
        return {"tensor": [str(value.dtype), list(value.shape)], "sha256": h.hexdigest()}
    if isinstance(value, Mapping):
        return {str(k): describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [describe(v) for v in value]]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        try:
            return {"type": _qualname(value), "dict": describe(to_dict())}
        except Exception:  # noqa: BLE001 - a to_dict that fails falls back to the object's fields
            pass
    fields = getattr(value, "__dict__", None)
    if fields is not None and not callable(value):
        return {
            "type": _qualname(value),
            "fields": describe({k: v for k, v in fields.items() if not k.startswith("_")}),
        }
    return {"type": _qualname(value), "repr": repr(value)}


def _qualname(value: Any) -> str:
    cls = value if isinstance(value, type) else type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def model_digest(model: Any) -> dict[str, Any]:
    """The model's class, config, generation config, and a digest of every parameter and buffer and of every
    submodule's class and train/eval flag."""
    h = hashlib.sha256()
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        h.update(name.encode())
        _digest_tensor(h, tensor)
    modules = getattr(model, "named_modules", None)
    for name, module in modules() if callable(modules) else ():
        h.update(f"{name}:{type(module).__qualname__}:{bool(module.training)}".encode())
    return {
        "class": _qualname(model),
        "config": _config_json(getattr(model, "config", None)),
        "generation_config": _config_json(getattr(model, "generation_config", None)),
        "weights": h.hexdigest(),
    }


def _config_json(config: Any) -> Any:
    """A transformers config (or generation config) as its full JSON, anything else described."""
    to_json = getattr(config, "to_json_string", None)
    return to_json(use_diff=False) if callable(to_json) else describe(config)


def _source_files(roots: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files.extend(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(set(files))


@cache
def source_digest(roots: tuple[Path, ...]) -> str:
    """A digest of every Python source file under ``roots`` (relative names and contents)."""
    h = hashlib.sha256()
    for path in _source_files(roots):
        h.update(str(path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def implementation_sources(adapter: Any) -> tuple[Path, ...]:
    """The source that decides what an adapter's exports contain: the implementation's top-level package (or
    the module for a single file), the runtime it falls back to, and the adapters themselves."""
    roots: set[Path] = {Path(__file__).resolve().parent / "adapters"}
    for attr in ("module", "runtime", "utils", "components", "decode"):
        module = getattr(adapter, attr, None)
        name = getattr(module, "__name__", None)
        if not name:
            continue
        top = sys.modules.get(name.split(".")[0])
        where = getattr(top, "__file__", None) if top is not None else None
        if name.startswith("transformers."):  # the peer: its exporters package, not all of transformers
            where = getattr(module, "__file__", None)
        if where:
            path = Path(where).resolve()
            roots.add(path.parent if path.name == "__init__.py" else path)
    return tuple(sorted(roots))


def installed_versions() -> dict[str, str | None]:
    from .versions import installed

    return {name: installed(name) for name in VERSIONED}


def export_key(
    adapter: Any,
    backend: str,
    model: Any,
    inputs: Mapping[str, Any],
    config: Any,
    what: str = "export",
    options: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one export (see the module docstring for what it covers)."""
    try:
        config_description = describe(adapter.config_to_dict(config))
    except Exception:  # noqa: BLE001 - live objects in a config (Dim specs) are described field by field
        config_description = describe(config)
    payload = {
        "format": FORMAT,
        "implementation": [adapter.name, adapter.version(), source_digest(implementation_sources(adapter))],
        "backend": backend,
        "what": what,
        "options": describe(dict(options or {})),
        "config": config_description,
        "model": model_digest(model),
        "inputs": describe(dict(inputs)),
        "versions": installed_versions(),
        "environment": implementation_environment(adapter.name),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:40]


def implementation_environment(name: str) -> dict[str, str]:
    """The implementation's own environment variables (``<NAME>_*``): settings it reads that can change an export."""
    prefix = "".join(c if c.isalnum() else "_" for c in name).upper() + "_"
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefix)}


# -- the store -----------------------------------------------------------------------------------------------


def _stored(artifact: str, files: Mapping[str, Any]) -> bool:
    """Whether an artifact address names what the entry holds: a file, or a folder with files in it (an adapter
    may save a whole folder, e.g. ``save_pretrained``), either with an optional ``#component`` suffix that the
    adapter's ``load`` reads (one saved folder serving several components)."""
    path = artifact.partition("#")[0].rstrip("/")
    if path in ("", "."):
        return bool(files)
    return path in files or any(name.startswith(path + "/") for name in files)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ArtifactCache:
    """Saved artifacts by export key under ``root`` (``entries/<key>/``, ``locks/``, ``staging/``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / "entries" / key

    def _lock(self, key: str) -> Any:
        from filelock import FileLock

        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        return FileLock(str(locks / f"{key}.lock"))

    def lookup(self, key: str) -> CacheHit | None:
        """The entry's artifacts, or None; an entry that does not match its manifest is discarded."""
        folder = self.entry(key)
        if not folder.exists():
            return None
        problem = self._verify(folder)
        if problem is None:
            manifest = json.loads((folder / MANIFEST).read_text())
            return CacheHit(key, {name: folder / rel for name, rel in manifest["artifacts"].items()})
        warnings.warn(
            ArtifactCacheWarning(f"hfexport artifact cache: discarding {folder} ({problem}); exporting again"),
            stacklevel=2,
        )
        shutil.rmtree(folder, ignore_errors=True)
        return None

    @staticmethod
    def _verify(folder: Path) -> str | None:
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            files, artifacts = manifest["files"], manifest["artifacts"]
            if manifest.get("format") != FORMAT:
                return f"manifest format {manifest.get('format')!r}, expected {FORMAT}"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"no readable manifest: {type(exc).__name__}: {exc}"
        for rel, (size, sha) in files.items():
            path = folder / rel
            if not path.is_file():
                return f"{rel} is missing"
            if path.stat().st_size != size:
                return f"{rel} has {path.stat().st_size} bytes, the manifest says {size}"
            if _file_sha256(path) != sha:
                return f"{rel} does not match its SHA-256"
        missing = sorted(name for name, rel in artifacts.items() if not _stored(rel, files))
        return f"artifacts {missing} are not among its files" if missing else None

    def get_or_build(self, key: str, build: Callable[[Path], Mapping[str, Path]]) -> tuple[dict[str, Path], bool]:
        """The artifacts under ``key``: from the cache (``True``), else ``build(folder)`` saves them into a fresh
        folder, which is stored (``False``). One process builds a key at a time; a build that raises stores
        nothing and leaves no partial entry."""
        with self._lock(key):
            hit = self.lookup(key)
            if hit is not None:
                return dict(hit.paths), True
            staging_root = self.root / "staging"
            staging_root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{key[:12]}-", dir=staging_root))
            try:
                built = {name: Path(path) for name, path in build(staging).items()}
                artifacts = {
                    name: path.resolve().relative_to(staging.resolve()).as_posix() for name, path in built.items()
                }
                files = {
                    p.relative_to(staging).as_posix(): [p.stat().st_size, _file_sha256(p)]
                    for p in sorted(staging.rglob("*"))
                    if p.is_file()
                }
                manifest = {
                    "format": FORMAT,
                    "key": key,
                    "created": time.time(),
                    "artifacts": artifacts,
                    "files": files,
                }
                (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
                target = self.entry(key)
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():  # left by a writer that died after its rename check: never trusted
                    shutil.rmtree(target, ignore_errors=True)
                os.replace(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            log.debug("artifact cache: stored %s", key)
            return {name: target / rel for name, rel in artifacts.items()}, False


def default_root(rootdir: Path) -> Path:
    """Where the cache lives when no folder is given: beside pytest's own cache."""
    return Path(rootdir) / ".pytest_cache" / "d" / "hfexport-artifacts"

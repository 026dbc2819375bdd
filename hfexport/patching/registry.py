"""The three registries of export workarounds, keyed by backend.

A patch is a reversible attribute swap that lives only inside an export; an FX
node fix rewrites one node of a traced graph; an FX program fix rewrites a whole
ExportedProgram. Each entry carries a one-line reason: which upstream bug or
pattern it works around and how to tell it can go. Modeling code is never edited.

An entry that answers one upstream release's behaviour carries ``when``, the releases it applies to
("onnxscript<0.7"): it is skipped elsewhere, so the code base serves the whole tested window
(``hfexport/pins/window.toml``) and the entry can go once the window no longer holds such a release.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import environment, speedups

logger = logging.getLogger(__name__)

_MISSING = object()


@dataclass(frozen=True)
class Patch:
    backend: str
    path: str
    factory: Callable[[Any], Any]  # factory(original) -> replacement
    reason: str
    when: str | None = None
    speedup: bool = False  # only faster, same result: off under hfexport.speedups' switch

    @property
    def applies(self) -> bool:
        return environment.holds(self.when) and (not self.speedup or speedups.enabled())


@dataclass(frozen=True)
class Fix:
    backend: str
    fn: Callable
    reason: str
    when: str | None = None
    speedup: bool = False

    @property
    def applies(self) -> bool:
        return environment.holds(self.when) and (not self.speedup or speedups.enabled())


PATCHES: dict[str, list[Patch]] = {}
FX_NODE_FIXES: dict[str, list[Fix]] = {}
FX_PROGRAM_FIXES: dict[str, list[Fix]] = {}


def _reason_of(fn: Callable, reason: str | None) -> str:
    text = reason or (fn.__doc__ or "").strip().splitlines()[0:1]
    if isinstance(text, list):
        text = text[0] if text else ""
    if not text:
        raise ValueError(
            f"{fn.__name__}: every patch or fix must say which upstream bug it works around (a docstring or reason=...)"
        )
    return text


def register_patch(
    backend: str, *paths: str, reason: str | None = None, when: str | None = None, speedup: bool = False
) -> Callable:
    """Register ``factory(original) -> replacement`` for each dotted path, installed only during exports.
    ``speedup``: the patch only makes the work faster (``hfexport.speedups`` turns it off)."""
    if not paths:
        raise ValueError("register_patch needs at least one dotted path, e.g. 'torch.nn.functional.pad'")

    def decorator(factory: Callable) -> Callable:
        why = _reason_of(factory, reason)
        for path in paths:
            PATCHES.setdefault(backend, []).append(Patch(backend, path, factory, why, when, speedup))
        return factory

    return decorator


def register_fx_node_fix(backend: str, reason: str | None = None, when: str | None = None) -> Callable:
    """Register ``fix(graph_module, node) -> bool`` (True when it rewrote the node), for the releases ``when``."""

    def decorator(fn: Callable) -> Callable:
        FX_NODE_FIXES.setdefault(backend, []).append(Fix(backend, fn, _reason_of(fn, reason), when))
        return fn

    return decorator


def register_fx_program_fix(
    backend: str, reason: str | None = None, when: str | None = None, speedup: bool = False
) -> Callable:
    """Register ``fix(exported_program) -> None``, run on the program after tracing, for the releases ``when``;
    ``speedup``: it only makes the program faster (``hfexport.speedups`` turns it off)."""

    def decorator(fn: Callable) -> Callable:
        FX_PROGRAM_FIXES.setdefault(backend, []).append(Fix(backend, fn, _reason_of(fn, reason), when, speedup))
        return fn

    return decorator


# Modeling code is patched only where the caller has loaded it: a model being exported has imported its own
# modeling module, and importing another one is a change to the caller's world (transformers' lazy imports
# run, and loading e.g. llava's modeling code replaced sys.modules["transformers"]).
LOADED_ONLY = ("transformers.models.",)


def expand_path(path: str) -> list[str]:
    """A path with ``*`` in its module part (``transformers.models.*.repeat_kv``: a function every modeling file
    defines for itself) names that attribute in every loaded module the pattern matches; any other path is itself."""
    if "*" not in path:
        return [path]
    module_pattern, attribute = path.rsplit(".", 1)
    return sorted(f"{name}.{attribute}" for name in list(sys.modules) if fnmatch.fnmatchcase(name, module_pattern))


def resolve_owner(path: str) -> tuple[Any, str] | None:
    """'pkg.mod.Class.attr' -> (Class, 'attr'); None when the module or object does not exist here, or when it
    is modeling code (``LOADED_ONLY``) that is not imported yet."""
    parts = path.split(".")
    loaded_only = path.startswith(LOADED_ONLY)
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        if loaded_only:
            obj = sys.modules.get(module_name)
            if obj is None:
                continue
            if hasattr(obj, "__path__"):  # a package: reaching the module inside would import it
                return None
        else:
            try:
                obj = importlib.import_module(module_name)
            except ImportError:
                continue
        try:
            for name in parts[split:-1]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        if not hasattr(obj, parts[-1]):
            return None
        return obj, parts[-1]
    return None


@contextlib.contextmanager
def patch_attribute(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """Swap one attribute, and put back exactly what was there (own attribute or inherited)."""
    own = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if own is _MISSING:
            try:
                delattr(owner, name)
            except AttributeError:
                pass
        else:
            setattr(owner, name, own)


@contextlib.contextmanager
def apply_patches(*backends: str) -> Iterator[list[Patch]]:
    """Install every registered patch of these backends for the block; revert all on exit, errors included."""
    installed: list[Patch] = []
    with contextlib.ExitStack() as stack:
        for backend in backends:
            for patch in PATCHES.get(backend, []):
                if not patch.applies:
                    continue
                for path in expand_path(patch.path):
                    resolved = resolve_owner(path)
                    if resolved is None:
                        logger.debug("patch target %s not present in this environment; skipped", path)
                        continue
                    owner, name = resolved
                    original = getattr(owner, name)
                    if isinstance(owner, type) and isinstance(owner.__dict__.get(name), (staticmethod, classmethod)):
                        wrapper = type(owner.__dict__[name])
                        replacement = wrapper(patch.factory(owner.__dict__[name].__func__))
                    else:
                        replacement = patch.factory(original)
                    stack.enter_context(patch_attribute(owner, name, replacement))
                    if not installed or installed[-1] is not patch:
                        installed.append(patch)
        yield installed


def apply_fx_node_fixes(backend: str, graph_module: Any) -> int:
    """Run every node fix of the backend over the graph; returns how many nodes were rewritten."""
    changed = 0
    for fix in FX_NODE_FIXES.get(backend, []):
        if not fix.applies:
            continue
        for node in list(graph_module.graph.nodes):
            if fix.fn(graph_module, node):
                changed += 1
    if changed:
        graph_module.graph.lint()
        graph_module.recompile()
    return changed


def apply_fx_program_fixes(backend: str, exported_program: Any) -> None:
    for fix in FX_PROGRAM_FIXES.get(backend, []):
        if fix.applies:
            fix.fn(exported_program)

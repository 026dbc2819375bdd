"""Which tests run where: the backend axis, the report key of each test, known failures as strict xfails,
and the version and device markers checked at setup."""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import pytest

from .backends import known as known_backends
from .settings import settings_of

IDENTITY = pytest.StashKey[tuple]()
MATCHED_XFAILS = pytest.StashKey[set]()


def parametrize_backends(metafunc: pytest.Metafunc) -> None:
    """Every test that takes ``hfexport_backend`` runs once per selected backend (``hfexport_backend(...)``
    narrows that); where none of its backends is selected, it is not collected at all."""
    if "hfexport_backend" not in metafunc.fixturenames:
        return
    selected = settings_of(metafunc.config).backends
    marker = metafunc.definition.get_closest_marker("hfexport_backend")
    chosen = selected
    if marker is not None:
        wanted = [b for arg in marker.args for b in (arg if isinstance(arg, (list, tuple)) else [arg])]
        chosen = [b for b in selected if b in wanted]
    metafunc.parametrize("hfexport_backend", [pytest.param(b, id=b, marks=getattr(pytest.mark, b)) for b in chosen])


def identity(item: pytest.Item) -> tuple[str, str, str] | None:
    """The report key (model, backend, check) of a test: from ``hfexport_case(model, check)``, from a
    ``parametrize_with_checks`` case, else (test name, backend, "export")."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "hfexport_backend" not in callspec.params:
        return None
    backend = callspec.params["hfexport_backend"] or "-"
    case = item.get_closest_marker("hfexport_case")
    if case is not None and len(case.args) == 2:
        return (str(case.args[0]), backend, str(case.args[1]))
    marker = item.get_closest_marker("hfexport_checks")
    if marker is not None:
        value = callspec.params.get(marker.kwargs.get("argname", "check"))
        if value is not None and hasattr(value, "case"):
            return (value.case.name, backend, value.check)
    return (getattr(item, "originalname", item.name), backend, "export")


def apply_known_failures(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Key each test and mark the known failures as strict xfails (an entry that matches nothing is warned about)."""
    from . import xfails

    settings = settings_of(config)
    matched = config.stash.setdefault(MATCHED_XFAILS, set())
    for item in items:
        key = identity(item)
        if key is not None:
            item.stash[IDENTITY] = key
        hit = xfails.find(settings.xfails, item.nodeid, key) if settings.xfails else None
        source = settings.xfails_path
        marker = item.get_closest_marker("hfexport_checks")
        if hit is None and marker is not None and marker.kwargs.get("xfails"):
            hit = xfails.find(marker.kwargs["xfails"], item.nodeid, key)
            source = "parametrize_with_checks"
        elif hit is not None:
            matched.add(hit[0])
        if hit is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known failure ({source}: {hit[0]}): {hit[1]}", strict=True))
    import fnmatch

    def in_scope(key: str) -> bool:  # an entry for a backend this run does not select cannot match
        if "::" in key:  # a test id: its first parameter names the backend where it has one ([onnx-llama])
            first = key.rpartition("[")[2].split("-")[0].rstrip("]") if key.endswith("]") else ""
            return first not in known_backends() or first in settings.backends
        return any(fnmatch.fnmatchcase(b, key.split("/")[1]) for b in settings.backends)

    unmatched = [k for k in settings.xfails if k not in matched and in_scope(k)]
    if unmatched:
        warnings.warn(
            pytest.PytestWarning(
                f"hfexport: {len(unmatched)} known-failure entr{'y' if len(unmatched) == 1 else 'ies'} in "
                f"{settings.xfails_path} match no collected test: {', '.join(unmatched)}"
            ),
            stacklevel=2,
        )


def check_markers(item: pytest.Item) -> None:
    """``requires_cuda``, ``requires_pins`` and ``hfexport_versions``: skip (or xfail) with the measured reason."""
    from . import versions

    if item.get_closest_marker("requires_cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("requires_cuda: CUDA is not available on this machine")
    settings = settings_of(item.config)
    for marker in item.iter_markers("requires_pins"):
        off = versions.drift(settings.pins, list(marker.args) or None)
        if off:
            text = ", ".join(f"{n} {got or 'missing'} (pin {pin})" for n, (pin, got) in off.items())
            _skip_or_xfail(marker, f"requires_pins: installed versions differ from the pins: {text}")
    for marker in item.iter_markers("hfexport_versions"):
        off = versions.outside({k: v for k, v in marker.kwargs.items() if k != "xfail"})
        if off:
            text = ", ".join(f"{n} {got or 'missing'} not {spec}" for n, (spec, got) in off.items())
            _skip_or_xfail(marker, f"hfexport_versions: {text}")


def _skip_or_xfail(marker: Any, reason: str) -> None:
    if marker.kwargs.get("xfail"):
        pytest.xfail(reason)
    pytest.skip(reason)


def shard_of(nodeid: str, shards: int) -> int:
    """The shard (1-based, of ``shards``) a test id belongs to: a digest of the id, so every process, machine and
    CI job computes the same partition from the same collection, whatever order it collected in."""
    return int(hashlib.sha1(nodeid.encode()).hexdigest(), 16) % shards + 1


def apply_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--hfexport-shard=K/N``: deselect every test outside shard K (``shard_of``)."""
    shard = settings_of(config).shard
    if shard is None:
        return
    k, n = shard
    outside = [item for item in items if shard_of(item.nodeid, n) != k]
    if outside:
        config.hook.pytest_deselected(items=outside)
        items[:] = [item for item in items if shard_of(item.nodeid, n) == k]

"""The suite's shared fixtures: each zoo entry is exported once per backend and reused by every check.

The suite talks to the API only through the plugin's implementation adapter
(``hfexport_implementation``), so ``--hfexport-impl=transformers`` judges the peer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.zoo import ZooEntry, select

KNOWN_FAILURES = Path(__file__).parent / "known_failures"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hfexport_case(model, check): the zoo entry and check a test measures "
                                       "(the report's model/backend/check key)")


def entry_params(check: str, names: tuple[str, ...] | None = None, case: str | None = None) -> list[Any]:
    """pytest params over the zoo entries that opt into ``check`` (or the given names), tagged for the report
    as ``case`` (default: the check's name). ``DEFAULT_TIER`` decides which cases carry ``hfexport_slow``."""
    entries = select(list(names)) if names else select(check=check)
    return [pytest.param(entry, id=entry.name, marks=[pytest.mark.hfexport_case(entry.name, case or check)])
            for entry in entries]


@dataclass
class Exported:
    entry: ZooEntry
    model: Any
    sample: dict
    program: Any = None
    path: Path | None = None
    runner: Any = None
    seconds: float = 0.0
    error: BaseException | None = None
    extra: dict = field(default_factory=dict)


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"dir": tmp_path_factory.mktemp("conformance")}


@pytest.fixture
def exported(export_cache: dict, hfexport_implementation: Any, hfexport_backend: str):
    """exported(entry) -> Exported: plain dynamic export, saved and loaded back, cached per session."""

    def build(entry: ZooEntry, key: tuple) -> Exported:
        model = entry.model()
        result = Exported(entry, model, entry.sample_inputs(model))
        try:
            exporter = hfexport_implementation.exporter(hfexport_backend)
            config = hfexport_implementation.config(hfexport_backend, dynamic=True)
            start = time.perf_counter()
            result.program = hfexport_implementation.export(exporter, model, result.sample, config)
            result.seconds = time.perf_counter() - start
            directory = export_cache["dir"] / f"{key[0]}-{key[1]}"
            directory.mkdir(exist_ok=True)
            result.path = hfexport_implementation.save(exporter, result.program, directory, entry.name)
            result.runner = hfexport_implementation.load(result.path)
        except BaseException as exc:
            result.error = exc
        return result

    def get(entry: ZooEntry) -> Exported:
        key = (hfexport_implementation.name, hfexport_backend, entry.name)
        return _cached(export_cache, key, lambda: build(entry, key))

    return get


def _cached(cache: dict, key: tuple, build: Any) -> Any:
    """Build once per session; a failure is cached too, so the next check of that entry fails the same way, fast."""
    if key not in cache:
        cache[key] = build()
    result = cache[key]
    if result.error is not None:
        raise result.error
    return result


@dataclass
class GenerationExported:
    """One ``export_for_generation`` of a zoo entry: programs, loaded runners, and the eager references."""

    entry: ZooEntry
    model: Any
    inputs: dict
    components: dict = field(default_factory=dict)  # decompose_for_generation on the sample: eager references
    programs: dict = field(default_factory=dict)
    runners: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)
    seconds: float = 0.0
    error: BaseException | None = None


@pytest.fixture
def generation_exported(export_cache: dict, hfexport_implementation: Any, hfexport_backend: str):
    """generation_exported(entry, **options) -> GenerationExported, cached per session and options
    (``multi_token_decode``, ``generation_config``)."""

    def build(entry: ZooEntry, key: tuple, options: dict[str, Any]) -> GenerationExported:
        model = entry.model()
        result = GenerationExported(entry, model, entry.sample_inputs(model))
        try:
            exporter = hfexport_implementation.exporter(hfexport_backend)
            config = hfexport_implementation.config(hfexport_backend, dynamic=True)
            start = time.perf_counter()
            result.programs = hfexport_implementation.export_for_generation(
                exporter, model, result.inputs, config, **options)
            result.seconds = time.perf_counter() - start
            directory = export_cache["dir"] / f"gen-{len(export_cache)}-{key[1]}-{key[2]}-{entry.name}"
            directory.mkdir()
            for name, program in result.programs.items():
                result.paths[name] = hfexport_implementation.save(exporter, program, directory, name)
                result.runners[name] = hfexport_implementation.load(result.paths[name])
            decompose_options = {k: v for k, v in options.items() if k in ("multi_token_decode", "generation_config")}
            result.components = hfexport_implementation.decompose_for_generation(
                model, result.inputs, **decompose_options)
        except BaseException as exc:
            result.error = exc
        return result

    def get(entry: ZooEntry, **options: Any) -> GenerationExported:
        key = ("generation", hfexport_implementation.name, hfexport_backend, entry.name, repr(sorted(
            (k, v.to_dict() if hasattr(v, "to_dict") else v) for k, v in options.items())))
        return _cached(export_cache, key, lambda: build(entry, key, options))

    return get


# The default tier's coverage, in one table. ExecuTorch lowering costs 30-60 s per graph on 2 cores
# (to_edge_transform_and_lower + XNNPACK), so on ExecuTorch the default tier keeps a few entries and
# everything else carries ``hfexport_slow`` (run them with -m "" or -m hfexport_slow). Multi-token decode
# and the static cache export one more program per entry: a representative set stays in the default tier
# on dynamo and onnx. (check, backend) -> entries kept in the default tier; an absent key keeps every entry.
DEFAULT_TIER: dict[tuple[str, str], set[str]] = {
    ("export", "executorch"): {"llama", "bert", "vit"},
    ("shapes", "executorch"): {"llama", "vit"},
    ("generation", "executorch"): {"llama"},
    ("generation_tokens", "executorch"): {"llama"},
    ("hygiene", "executorch"): {"qwen2_vl"},  # a failing export: nothing may be left patched
    ("multi_token_decode", "executorch"): set(),
    ("static_cache", "executorch"): set(),
    ("static_cache_in_place", "executorch"): set(),
    **{("multi_token_decode", backend): {"llama", "gemma3", "qwen3_moe"} for backend in ("dynamo", "onnx")},
    **{(check, backend): {"llama", "qwen3_moe", "gpt2"} for check in ("static_cache", "static_cache_in_place")
       for backend in ("dynamo", "onnx")},
}


def known_failures_file(impl: str) -> Path:
    return KNOWN_FAILURES / f"{impl}.toml"


def _use_known_failures(config: pytest.Config) -> None:
    """The implementation's known-failures file applies unless --hfexport-xfails names another."""
    from pytest_hfexport import xfails
    from pytest_hfexport.plugin import SETTINGS

    settings = config.stash.get(SETTINGS, None)
    if settings is None or settings.xfails_path:
        return
    path = known_failures_file(settings.impl)
    if path.exists():
        settings.xfails_path = str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
        try:
            settings.xfails = xfails.load(path)
        except xfails.XfailFileError as exc:
            raise pytest.UsageError(f"{path}: {exc}") from exc


@pytest.hookimpl(tryfirst=True)  # before the plugin applies known failures and pytest's -m selection reads marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _use_known_failures(config)
    for item in items:
        marker = item.get_closest_marker("hfexport_case")
        backend = getattr(item, "callspec", None) and item.callspec.params.get("hfexport_backend")
        if marker is None or not backend:
            continue
        model, check = marker.args[:2]
        # One worker per model x backend (with --dist loadgroup): its checks share one export.
        item.add_marker(pytest.mark.xdist_group(f"{backend}-{model}"))
        kept = DEFAULT_TIER.get((check, backend))
        if kept is not None and model not in kept:
            item.add_marker(pytest.mark.hfexport_slow)

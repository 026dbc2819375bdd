"""The suite's shared fixtures: each zoo entry is exported once per backend and options, and reused by
every check that judges that artifact.

The suite talks to the implementation only through the plugin's adapter (the
``hfexport_implementation`` fixture), and builds every reference from eager transformers
with ``pytest_hfexport.reference``: it imports nothing from the implementation it judges.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.zoo import REALSIZE, ZooEntry, select
from pytest_hfexport.artifact_cache import describe
from pytest_hfexport.localise import Artifact

KNOWN_FAILURES = Path(__file__).parent / "known_failures"
# Tokens every generation check runs for (the reference must also be non-degenerate: tests/test_zoo.py).
NEW_TOKENS = 32
# Slots of the static cache the decode loops run in: the longest prompt (9) plus NEW_TOKENS fit.
MAX_CACHE_LEN = 64


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hfexport_realsize: a check of a real-size zoo entry (slow; run with -m hfexport_realsize)"
    )
    config.addinivalue_line(
        "markers", "hfexport_coverage: a cell of the coverage sweep (collected only with --coverage-sweep)"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    from conformance.coverage.collect import addoption

    addoption(parser)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The coverage sweep (conformance/coverage/) is collected only when asked for (``--coverage-sweep``)."""
    from conformance.coverage.collect import ignore

    return ignore(collection_path, config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from conformance.coverage.collect import header

    return header(config)


def case(entry_or_name: Any, check: str, *, id: str | None = None, values: tuple = ()) -> Any:
    """One pytest param keyed for the report as (subject, check)."""
    name = getattr(entry_or_name, "name", entry_or_name)
    return pytest.param(*(values or (entry_or_name,)), id=id or name, marks=[pytest.mark.hfexport_case(name, check)])


def entry_params(check: str, key: str | None = None, names: tuple[str, ...] | None = None) -> list[Any]:
    """pytest params over the zoo entries that opt into ``check`` (or the named ones), keyed ``key or check``."""
    entries = select(list(names)) if names else select(check=check, tier=None)
    return [case(entry, key or check) for entry in entries]


@dataclass
class Exported:
    """One export of a zoo entry through the implementation under test: programs, saved paths, runners."""

    entry: ZooEntry
    model: Any
    inputs: dict
    programs: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)
    runners: dict = field(default_factory=dict)
    seconds: float = 0.0
    error: BaseException | None = None
    cached: bool = False  # the saved artifacts came from the artifact cache (programs then holds names only)
    reexport: Callable[[], dict] | None = None  # the implementation's export again: the programs by name
    raw: Callable[[Path], Path] | None = None  # the backend file inside a saved artifact

    @property
    def runner(self) -> Any:
        return self.runners["model"]

    def artifact(self, name: str = "model") -> Artifact:
        """What the locator reads on a mismatch: the saved backend file, and the program exported again (only
        then: the in-memory programs are not kept)."""
        path = self.paths[name]
        reexport = self.reexport
        return Artifact(
            self.raw(path) if self.raw is not None else path,
            (lambda: reexport()[name]) if reexport is not None else None,
        )


# Exports kept loaded at once per worker. The checks of one model x backend run one after another (one xdist
# group, and the items are ordered by group), so a few recent ones serve every check; keeping all of them
# (models, loaded runtimes) grew a worker of the whole tier past 13 GiB and out of memory.
KEPT_EXPORTS = 6


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"dir": tmp_path_factory.mktemp("conformance"), "entries": OrderedDict(), "built": 0}


def _cached(cache: dict, key: tuple, build: Callable[[], Exported]) -> Exported:
    """Build once while recent; a failure is kept too, so every check of that artifact fails the same way, fast.
    The least recently used exports beyond KEPT_EXPORTS are let go (the artifact cache makes a rebuild cheap)."""
    entries: OrderedDict[tuple, Exported] = cache["entries"]
    if key in entries:
        entries.move_to_end(key)
    else:
        cache["built"] += 1
        entries[key] = build()
        while len(entries) > KEPT_EXPORTS:
            entries.popitem(last=False)
        gc.collect()  # models and runtimes hold reference cycles: free them now, not at some later collection
    result = entries[key]
    if result.error is not None:
        raise result.error
    return result


@pytest.fixture
def exported(
    export_cache: dict, hfexport_implementation: Any, hfexport_backend: str, hfexport_artifact_cache: Any
) -> Callable[..., Exported]:
    """``exported(entry)``: the plain dynamic export; ``exported(entry, generation=True, **options)``: every
    ``export_for_generation`` component; ``config=`` replaces the config's ``dynamic=True`` by other fields
    (explicit ``dynamic_shapes``). Saved, loaded back, kept per session; saved artifacts are reused
    across sessions through the plugin's artifact cache (unless --hfexport-no-cache), and loaded and run
    against eager by every check either way."""
    adapter = hfexport_implementation

    def build(
        entry: ZooEntry, directory: Path, generation: bool, options: dict[str, Any], fields: dict[str, Any]
    ) -> Exported:
        model = entry.model()
        result = Exported(entry, model, entry.sample_inputs(model))
        try:
            adapter.require("export", hfexport_backend)
            if generation:
                adapter.require("export_for_generation", hfexport_backend)
            exporter = adapter.exporter(hfexport_backend)
            config = adapter.config(hfexport_backend, **fields)

            def export_again() -> dict:
                if generation:
                    return dict(adapter.export_for_generation(exporter, model, result.inputs, config, **options))
                return {"model": adapter.export(exporter, model, result.inputs, config)}

            result.reexport, result.raw = export_again, adapter.raw_artifact

            def export_and_save(folder: Path) -> dict[str, Path]:
                start = time.perf_counter()
                if generation:
                    result.programs = adapter.export_for_generation(exporter, model, result.inputs, config, **options)
                else:
                    result.programs = {"model": adapter.export(exporter, model, result.inputs, config)}
                result.seconds = time.perf_counter() - start
                return {name: adapter.save(exporter, prog, folder, name) for name, prog in result.programs.items()}

            if hfexport_artifact_cache is None:
                directory.mkdir(parents=True)
                result.paths = export_and_save(directory)
            else:
                from pytest_hfexport.artifact_cache import export_key

                what = "export_for_generation" if generation else "export"
                key = export_key(adapter, hfexport_backend, model, result.inputs, config, what, options)
                result.paths, result.cached = hfexport_artifact_cache.get_or_build(key, export_and_save)
            # Names only from here on: the checks run the saved artifacts, and the in-memory programs (an
            # ExecuTorch manager keeps every lowering stage) would pin gigabytes per worker for the session.
            result.programs = dict.fromkeys(result.programs or result.paths)
            for name, path in result.paths.items():
                result.runners[name] = adapter.load(path)
        except BaseException as exc:  # kept and re-raised to every check of this artifact
            result.error = exc
        return result

    def get(
        entry: ZooEntry, generation: bool = False, config: dict[str, Any] | None = None, **options: Any
    ) -> Exported:
        fields = config if config is not None else {"dynamic": True}
        described = sorted((k, v.to_dict() if hasattr(v, "to_dict") else v) for k, v in options.items())
        key = (adapter.name, hfexport_backend, entry.name, generation, repr(described), repr(describe(fields)))
        directory = export_cache["dir"] / f"{export_cache['built']}-{hfexport_backend}-{entry.name}"
        return _cached(export_cache, key, lambda: build(entry, directory, generation, options, fields))

    return get


def static_options() -> dict[str, Any]:
    import transformers

    return {
        "multi_token_decode": True,
        "generation_config": transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN),
    }


# -- tiers and known failures -------------------------------------------------------------------------------

# The default tier's coverage, in one table: (check, backend) -> entries kept in the default tier; an absent
# key keeps every entry, the rest carry ``hfexport_slow`` (run them with -m "" or -m hfexport_slow).
# Every backend runs every entry's plain export, shapes and generation components and tokens (one export per
# entry and kind serves all its checks). The static cache keeps the seven decoders of STATIC_CACHE_ENTRIES on every
# backend; multi-token decode keeps five entries on Dynamo and ONNX, none on ExecuTorch, where it runs in the slow
# tier; ExecuTorch's hygiene checks (uncached exports) keep a decoder and a multimodal model
# (docs/performance.md, "The default tier on ExecuTorch").
# sweep_gemma2: eager attention (additive masks) with sliding layers, drawn from the coverage sweep.
STATIC_CACHE_ENTRIES = {"llama", "qwen2", "gemma3", "mistral_sliding", "qwen3_moe", "gpt2", "sweep_gemma2"}
# Backends by the cost of their exports, slowest first: the order their test groups are handed to workers.
SLOWEST_FIRST = ("executorch", "onnx", "dynamo")

DEFAULT_TIER: dict[tuple[str, str], set[str]] = {
    **{
        (check, backend): STATIC_CACHE_ENTRIES
        for backend in ("dynamo", "onnx", "executorch")
        for check in ("static_cache", "static_cache_batch", "static_cache_in_place")
    },
    # The static prefill on generate()'s own call; qwen3 is the layer_types model whose prefill gets
    # {'full_attention': None} from generate().
    **{
        (check, backend): STATIC_CACHE_ENTRIES | {"qwen3"}
        for backend in ("dynamo", "onnx", "executorch")
        for check in ("static_prefill",)
    },
    **{
        (check, backend): {"llama", "gemma3", "qwen3_moe", "t5", "mamba"}
        for backend in ("dynamo", "onnx")
        for check in ("multi_token_decode", "multi_token_decode_batch")
    },
    **{(check, "executorch"): set() for check in ("multi_token_decode", "multi_token_decode_batch")},
    ("hygiene", "executorch"): {"llama", "qwen2_vl"},
    # Quantized exports: a decoder and an encoder-decoder by default, every entry in the slow tier.
    **{
        (f"quantization_{scheme}", backend): {"llama", "t5"}
        for scheme in ("int8", "int4", "8da4w", "8da8w")
        for backend in ("dynamo", "onnx", "executorch")
    },
}


def known_failures_file(impl: str) -> Path:
    return KNOWN_FAILURES / f"{impl}.toml"


def _use_known_failures(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The implementation's known-failures file applies unless --hfexport-xfails names another."""
    from pytest_hfexport import xfails
    from pytest_hfexport.settings import SETTINGS

    settings = config.stash.get(SETTINGS, None)
    if settings is None or settings.xfails_path:
        return
    path = known_failures_file(settings.impl)
    if path.exists():
        settings.xfails_path = str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
        try:
            entries = xfails.load(path)
        except xfails.XfailFileError as exc:
            raise pytest.UsageError(f"{path}: {exc}") from exc
        # One file holds the zoo's entries and the coverage sweep's, which never run together: an entry whose test
        # file this run did not collect is out of scope here, not stale.
        # The sweep's own parametrization is narrowed at collection (scope, --coverage-only, build verdicts): there,
        # an entry for a cell not collected is out of scope too.
        ids = {item.nodeid for item in items}
        files = {nodeid.split("::", 1)[0] for nodeid in ids}

        def collected(key: str) -> bool:
            file = key.split("::", 1)[0]
            if "::" not in key or not any(f == file or f.endswith("/" + file) for f in files):
                return "::" not in key
            return not file.endswith("coverage/test_sweep.py") or any(i == key or i.endswith("/" + key) for i in ids)

        settings.xfails = {k: v for k, v in entries.items() if collected(k)}


@pytest.hookimpl(tryfirst=True)  # before the plugin applies known failures and pytest's -m selection reads marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _use_known_failures(config, items)
    groups: dict[int, str] = {}
    for item in items:
        marker = item.get_closest_marker("hfexport_case")
        backend = getattr(item, "callspec", None) and item.callspec.params.get("hfexport_backend")
        if marker is None or not backend:
            continue
        model, check = marker.args[:2]
        # One worker per model x backend (with --dist loadgroup): its checks share one export.
        item.add_marker(pytest.mark.xdist_group(f"{backend}-{model}"))
        groups[id(item)] = f"{backend}-{model}"
        kept = DEFAULT_TIER.get((check, backend))
        if model in REALSIZE:
            item.add_marker(pytest.mark.hfexport_realsize)
            item.add_marker(pytest.mark.hfexport_slow)
        elif kept is not None and model not in kept:
            item.add_marker(pytest.mark.hfexport_slow)
    # Each group's checks one after another (also without xdist), so the few exports kept loaded serve them all;
    # the costliest groups first (ExecuTorch's exports, then ONNX's; more checks, more exports), so that the last
    # groups xdist hands out are short and both workers finish together.
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        if id(item) in groups:
            first.setdefault(groups[id(item)], index)
    size = Counter(groups.values())

    def position(index: int, item: pytest.Item) -> tuple[int, int, int, int]:
        group = groups.get(id(item))
        if group is None:
            return (len(SLOWEST_FIRST), 0, index, index)
        backend = group.split("-", 1)[0]
        rank = SLOWEST_FIRST.index(backend) if backend in SLOWEST_FIRST else len(SLOWEST_FIRST)
        return (rank, -size[group], first[group], index)

    order = {id(item): position(index, item) for index, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])

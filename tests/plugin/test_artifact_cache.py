"""The artifact cache: a hit skips the export and never the judging; what the export depends on is in the key;
a corrupt or partial entry is discarded, never trusted; concurrent writers of one key export once."""

from __future__ import annotations

import json
import multiprocessing
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_hfexport import artifact_cache
from pytest_hfexport.adapters import Adapter
from pytest_hfexport.artifact_cache import MANIFEST, ArtifactCache, ArtifactCacheWarning, export_key
from pytest_hfexport.pipeline import ExportMismatch, Harness


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.proj(x)}


class CountingAdapter(Adapter):
    """Exports by keeping the module itself; saves its state dict; counts exports. ``skew`` perturbs what the
    loaded artifact returns (a wrong artifact that only a run against eager can catch)."""

    name = "counting"

    def __init__(self, skew: float = 0.0) -> None:
        self.exports = 0
        self.skew = skew

    def version(self) -> str:
        return "1"

    def config(self, backend: str, /, **fields: Any) -> dict[str, Any]:
        return {"backend": backend, **fields}

    def config_to_dict(self, config: Any) -> dict[str, Any]:
        return dict(config)

    def exporter(self, backend: str) -> str:
        return backend

    def export(self, exporter: Any, model: Any, inputs: Any, config: Any) -> Any:
        self.exports += 1
        return model

    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        path = Path(directory) / f"{stem}.pt"
        torch.save(program.state_dict(), path)
        return path

    def load(self, path: Path) -> Any:
        model = Tiny()
        model.load_state_dict(torch.load(path))
        return lambda **kw: {"y": model(**kw)["y"] + self.skew}


def inputs(rows: int = 2, seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {"x": torch.randn(rows, 4)}


def test_a_hit_skips_the_export_and_still_runs_the_artifact_against_eager(tmp_path):
    adapter = CountingAdapter()
    cache = ArtifactCache(tmp_path / "cache")
    first = Harness(adapter, "dynamo", workdir=tmp_path / "w1", cache=cache).export_and_compare(Tiny(), inputs())
    second = Harness(adapter, "dynamo", workdir=tmp_path / "w2", cache=cache).export_and_compare(Tiny(), inputs())
    assert adapter.exports == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.program is None and second.artifact == first.artifact and second.ok
    # The same cached artifact, loaded by a runtime that gets it wrong: the check still fails.
    skewed = Harness(CountingAdapter(skew=0.5), "dynamo", workdir=tmp_path / "w3", cache=cache)
    skewed.implementation.name = "counting"
    with pytest.raises(ExportMismatch):
        skewed.export_and_compare(Tiny(), inputs())


def test_no_cache_exports_every_time(tmp_path):
    adapter = CountingAdapter()
    for i in range(2):
        Harness(adapter, "dynamo", workdir=tmp_path / f"w{i}").export_and_compare(Tiny(), inputs())
    assert adapter.exports == 2


def _key(**change: Any) -> str:
    adapter = CountingAdapter()
    model = Tiny()
    if change.get("weights"):
        with torch.no_grad():
            model.proj.bias[0] += 1e-6
    if change.get("training"):
        model.proj.eval()  # one submodule's flag
    feed = inputs(rows=change.get("rows", 2), seed=change.get("seed", 1))
    config = adapter.config(change.get("backend", "dynamo"), dynamic=change.get("dynamic", True))
    return export_key(adapter, change.get("backend", "dynamo"), model, feed, config, change.get("what", "export"))


@pytest.mark.parametrize(
    "change",
    [
        {"weights": True},
        {"training": True},
        {"rows": 3},
        {"seed": 2},
        {"dynamic": False},
        {"backend": "onnx"},
        {"what": "export_for_generation"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_everything_an_export_depends_on_is_in_the_key(change):
    assert _key() == _key()  # a rebuilt model with the same seed is the same export
    assert _key(**change) != _key()


def test_the_implementations_own_environment_is_in_the_key(monkeypatch):
    """``HFEXPORT_SPEEDUPS=0`` (or any ``<NAME>_*`` setting of the implementation under test) is a new key: a run
    that turns hfexport's speed-ups off to tell their fault from a correctness one must not load artifacts
    exported with them. Another implementation's or the machine's other variables are not."""
    monkeypatch.delenv("COUNTING_SPEEDUPS", raising=False)
    before = _key()
    monkeypatch.setenv("SOMETHING_ELSE", "1")
    assert _key() == before
    monkeypatch.setenv("COUNTING_SPEEDUPS", "0")
    assert _key() != before


def test_versions_and_implementation_source_are_in_the_key(monkeypatch, tmp_path):
    base = _key()
    monkeypatch.setattr(artifact_cache, "installed_versions", lambda: {"torch": "0.0"})
    assert _key() != base
    monkeypatch.undo()
    source = tmp_path / "impl.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(artifact_cache, "implementation_sources", lambda adapter: (source,))
    edited = _key()
    source.write_text("x = 2\n")
    artifact_cache.source_digest.cache_clear()
    assert _key() != edited != base


def test_hfexport_key_covers_its_own_source():
    from pytest_hfexport.adapters import resolve

    roots = artifact_cache.implementation_sources(resolve("hfexport"))
    names = {root.name for root in roots}
    assert {"hfexport", "adapters"} <= names


def _store(cache: ArtifactCache, key: str = "k" * 40) -> tuple[dict[str, Path], list[int]]:
    calls: list[int] = []

    def build(folder: Path) -> dict[str, Path]:
        calls.append(1)
        (folder / "sub").mkdir()
        (folder / "sub" / "weights.bin").write_bytes(b"w" * 100)
        (folder / "model.pt").write_bytes(b"program")
        return {"model": folder / "model.pt"}

    paths, _ = cache.get_or_build(key, build)
    return paths, calls


@pytest.mark.parametrize(
    "damage",
    ["flip a byte", "truncate", "delete a side file", "delete the manifest", "garble the manifest", "old format"],
)
def test_a_damaged_entry_is_discarded_with_a_warning_and_rebuilt(tmp_path, damage):
    cache = ArtifactCache(tmp_path)
    paths, _ = _store(cache)
    entry = paths["model"].parent
    side, manifest = entry / "sub" / "weights.bin", entry / MANIFEST
    if damage == "flip a byte":
        side.write_bytes(b"x" + side.read_bytes()[1:])
    elif damage == "truncate":
        paths["model"].write_bytes(b"prog")
    elif damage == "delete a side file":
        side.unlink()
    elif damage == "delete the manifest":
        manifest.unlink()
    elif damage == "garble the manifest":
        manifest.write_text("{not json")
    else:
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": 0}))
    with pytest.warns(ArtifactCacheWarning, match="discarding"):
        again, calls = _store(cache)
    assert calls == [1] and again["model"].read_bytes() == b"program"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, calls = _store(cache)
    assert calls == []


def test_folder_and_component_addresses_are_reused(tmp_path):
    """An adapter that saves a whole folder (``save_pretrained``) and addresses components inside it as
    ``folder#component``: its entry is a hit next time, not discarded (the transformers adapter's entries were
    discarded on every lookup, while other workers were loading them)."""
    cache = ArtifactCache(tmp_path)
    calls = []

    def build(folder: Path) -> dict[str, Path]:
        calls.append(1)
        (folder / "saved").mkdir()
        (folder / "saved" / "export.json").write_text("{}")
        (folder / "saved" / "decode.pt2").write_bytes(b"decode")
        return {"model": folder / "saved", "decode": Path(f"{folder / 'saved'}#decode")}

    first, _ = cache.get_or_build("c" * 40, build)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second, hit = cache.get_or_build("c" * 40, build)
    assert hit and calls == [1] and second == first
    assert str(second["decode"]).endswith("saved#decode") and (second["model"] / "decode.pt2").is_file()


def test_a_failed_build_stores_nothing(tmp_path):
    cache = ArtifactCache(tmp_path)

    def build(folder: Path) -> dict[str, Path]:
        (folder / "half.pt").write_bytes(b"half")
        raise RuntimeError("lowering failed")

    with pytest.raises(RuntimeError, match="lowering failed"):
        cache.get_or_build("f" * 40, build)
    assert not cache.entry("f" * 40).exists()
    assert list((tmp_path / "staging").iterdir()) == []
    _, calls = _store(cache, "f" * 40)
    assert calls == [1]


def _race(root: str, key: str, log: str) -> None:
    def build(folder: Path) -> dict[str, Path]:
        with open(log, "a") as f:
            f.write("built\n")
        (folder / "model.pt").write_bytes(b"program")
        return {"model": folder / "model.pt"}

    paths, _ = ArtifactCache(root).get_or_build(key, build)
    assert paths["model"].read_bytes() == b"program"


def test_concurrent_writers_of_one_key_export_once(tmp_path):
    log = tmp_path / "log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_race, args=(str(tmp_path / "c"), "r" * 40, str(log))) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * 4
    assert log.read_text() == "built\n"


CACHED_TEST = """
    import json, os, torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(4, 3)

        def forward(self, x):
            return {"logits": self.proj(x)}

    def test_tiny(export_and_compare):
        torch.manual_seed(1)
        result = export_and_compare(Tiny(), {"x": torch.randn(2, 5, 4)}, {"x": torch.randn(3, 7, 4)})
        with open(os.environ["SEEN"], "a") as f:
            f.write(json.dumps([result.cached, result.program is None, sorted(result.seconds)]) + "\\n")
"""


@pytest.mark.parametrize(
    "options, ini, cached",
    [
        ((), "", [False, True]),
        (("--hfexport-no-cache",), "", [False, False]),
        ((), "hfexport_no_cache = true", [False, False]),
        (("--hfexport-cache-dir=elsewhere",), "", [False, True]),
    ],
    ids=["default", "no-cache", "ini-no-cache", "cache-dir"],
)
def test_plugin_reuses_artifacts_across_sessions(pytester, monkeypatch, options, ini, cached):
    seen = pytester.path / "seen.jsonl"
    monkeypatch.setenv("SEEN", str(seen))
    pytester.makepyfile(CACHED_TEST)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    for _ in range(2):
        pytester.runpytest_inprocess("--hfexport-backend=dynamo", "-p", "no:cacheprovider", *options).assert_outcomes(
            passed=1
        )
    rows = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [row[0] for row in rows] == cached
    assert rows[0][1:] == [False, ["eager", "export", "load", "run", "save"]]
    if cached[1]:
        assert rows[1][1:] == [True, ["cache", "eager", "load", "run"]]
    default = pytester.path / ".pytest_cache" / "d" / "hfexport-artifacts"
    where = pytester.path / "elsewhere" if "--hfexport-cache-dir=elsewhere" in options else default
    assert (where / "entries").is_dir() == cached[1]


@pytest.mark.parametrize("implementation", ["hfexport", "transformers"])
def test_explicit_dim_ranges_are_in_the_key(implementation):
    """An export with ``Dim(max=8)`` and one with ``Dim(max=9)`` are different programs (the second runs a length the
    first refuses): the suite's explicit-range check reuses artifacts through the cache, so the range must key."""
    from pytest_hfexport.adapters import resolve

    adapter = resolve(implementation)
    model, feed = Tiny(), inputs()

    def key(low: int, high: int) -> str:
        spec = {"x": {0: torch.export.Dim("rows", min=low, max=high)}}
        return export_key(adapter, "dynamo", model, feed, adapter.config("dynamo", dynamic_shapes=spec))

    assert key(1, 8) == key(1, 8)
    assert key(1, 9) != key(1, 8)
    assert key(2, 8) != key(1, 8)

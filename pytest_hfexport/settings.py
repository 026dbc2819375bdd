"""The plugin's options (each with an ini twin), markers, and the validated settings of a session.

Loading it must stay cheap: no torch, onnx or executorch import here or at configure time
(unless ``--hfexport-device=cuda`` asks for CUDA, which needs torch to check).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import backends as _backends

OPTIONS: list[tuple[str, str]] = [
    (
        "backend",
        "comma list of backends to test (dynamo, onnx, executorch) or 'all'; default: every backend whose "
        "packages are installed. A backend named here whose packages are missing is a usage error.",
    ),
    (
        "impl",
        "implementation of the export API under test: hfexport (default), transformers "
        "(transformers.exporters), or a dotted module exposing the same API",
    ),
    ("device", "device to export and run on: cpu (default), cuda or auto"),
    ("pins", "pins file (name==version lines) to compare installed versions with; default: hfexport's pins"),
    ("report", "write a JSON report here: one row per model x backend x check"),
    (
        "baseline",
        "an earlier JSON report: a row that passed there and does not pass now (fails, xfails, is "
        "unsupported or was not run) fails the session",
    ),
    ("xfails", "known-failures file (TOML or JSON): test id or model/backend/check = reason; strict xfails"),
    ("max-examples", "hypothesis examples per shape check (default: the active hypothesis profile's)"),
    ("hypothesis-profile", "load a hypothesis profile: hfexport-ci (derandomized, few examples) or hfexport-dev"),
    (
        "cache-dir",
        "folder of the artifact cache: an export whose model, weights, inputs, config, implementation and "
        "versions are unchanged reuses the saved artifact (still run against eager); default: "
        ".pytest_cache/d/hfexport-artifacts under the rootdir",
    ),
    (
        "worker-threads",
        "torch threads per process that runs tests: auto (default: under pytest-xdist, the cores shared among "
        "the workers; without xdist, torch's own choice), keep (torch's own choice), or a number",
    ),
    (
        "shard",
        "K/N: run only the K-th (1-based) of N shards of the collected tests, chosen by a digest of each test id, "
        "so N CI jobs with K = 1..N run every test exactly once; the baseline gate then judges only this shard's rows",
    ),
]
# Flags (no value): name -> help. Each has an ini twin that takes true/false.
FLAGS: dict[str, str] = {
    "no-cache": "export every time: neither read nor write the artifact cache",
}
DEVICES = ("cpu", "cuda", "auto")

MARKERS = [
    "hfexport_backend(*names): run this test only on these backends (among the selected ones)",
    "requires_cuda: skip unless CUDA is available",
    "requires_pins(*packages, xfail=False): skip (or xfail) where installed versions of these packages (default: all "
    "pinned) differ from the pins",
    "hfexport_versions(xfail=False, **ranges): skip (or xfail) unless installed versions are in the ranges, "
    "e.g. torch='>=2.13'",
    "hfexport_slow: a slow export test (deselect with -m 'not hfexport_slow')",
    "hfexport_checks(argname, xfails): set by parametrize_with_checks",
    "hfexport_case(model, check): the subject and check a test measures (the report's model/backend/check key)",
    "dynamo: runs on the dynamo backend (added to parametrized tests)",
    "onnx: runs on the onnx backend (added to parametrized tests)",
    "executorch: runs on the executorch backend (added to parametrized tests)",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hfexport", "export models and compare with eager PyTorch (pytest_hfexport)")
    for name, help_text in OPTIONS:
        dest = "hfexport_" + name.replace("-", "_")
        group.addoption(
            f"--hfexport-{name}",
            dest=dest,
            default=None,
            metavar=name.split("-")[-1].upper(),
            help=help_text + f" [ini: {dest}]",
        )
        parser.addini(dest, help_text, default=None)
    for name, help_text in FLAGS.items():
        dest = "hfexport_" + name.replace("-", "_")
        group.addoption(
            f"--hfexport-{name}", dest=dest, action="store_true", default=None, help=f"{help_text} [ini: {dest}]"
        )
        parser.addini(dest, help_text, type="bool", default=False)


def flag(config: pytest.Config, name: str) -> bool:
    """A flag's value: the command line, else its ini twin."""
    dest = "hfexport_" + name.replace("-", "_")
    value = config.getoption(dest, None)
    return bool(config.getini(dest)) if value is None else bool(value)


def option(config: pytest.Config, name: str) -> str | None:
    """The option's value: command line, then ini, then (for the backend) $HFEXPORT_BACKEND."""
    dest = "hfexport_" + name.replace("-", "_")
    value = config.getoption(dest, None)
    if value is None:
        value = config.getini(dest) or None
    if value is None and name == "backend":
        value = os.environ.get("HFEXPORT_BACKEND") or None
    return value


@dataclass
class Settings:
    backends: list[str]
    impl: str = "hfexport"
    device: str = "cpu"
    pins_path: str | None = None
    pins: dict[str, str] = field(default_factory=dict)
    report: str | None = None
    baseline: str | None = None
    xfails_path: str | None = None
    xfails: dict[str, str] = field(default_factory=dict)
    max_examples: int | None = None
    cache_dir: str | None = None  # the artifact cache's folder; None: no cache (--hfexport-no-cache)
    worker_threads: str | int = "auto"  # pytest_hfexport.worker_threads: auto, keep or a thread count
    shard: tuple[int, int] | None = None  # (K, N): this run is the K-th of N shards (``selection.apply_shard``)

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


SETTINGS = pytest.StashKey[Settings]()


def read_settings(config: pytest.Config) -> Settings:
    """Validate every option; a bad one is a usage error that says what to pass instead."""
    from . import adapters, versions, xfails

    impl = option(config, "impl") or "hfexport"
    if not adapters.exists(impl):
        raise pytest.UsageError(
            f"--hfexport-impl={impl}: no such module; use hfexport, transformers or a dotted "
            "module path that exposes AutoExportConfig and AutoHfExporter"
        )
    try:
        backends = _backends.select(option(config, "backend"), impl)
    except _backends.BackendSelectionError as exc:
        raise pytest.UsageError(str(exc)) from None
    device = option(config, "device") or "cpu"
    if device not in DEVICES:
        raise pytest.UsageError(f"--hfexport-device={device}: choose one of {', '.join(DEVICES)}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError("--hfexport-device=cuda but CUDA is not available here; use cpu or auto")
    pins_path = option(config, "pins")
    try:
        pins = versions.read_pins(pins_path)
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--hfexport-pins: {exc}") from None
    baseline = option(config, "baseline")
    if baseline and not Path(baseline).exists():
        raise pytest.UsageError(f"--hfexport-baseline={baseline}: no such file")
    xfails_path = option(config, "xfails")
    entries = {}
    if xfails_path:
        try:
            entries = xfails.load(xfails_path)
        except xfails.XfailFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    raw_examples = option(config, "max-examples")
    max_examples = None
    if raw_examples is not None:
        try:
            max_examples = int(raw_examples)
            assert max_examples > 0
        except (ValueError, AssertionError):
            raise pytest.UsageError(f"--hfexport-max-examples={raw_examples}: a positive integer") from None
    cache_dir = None
    if not flag(config, "no-cache"):
        from .artifact_cache import default_root

        cache_dir = option(config, "cache-dir") or str(default_root(config.rootpath))
    from . import worker_threads

    threads = worker_threads.parse(option(config, "worker-threads"))
    shard = parse_shard(option(config, "shard"))
    return Settings(
        backends,
        impl,
        device,
        pins_path,
        pins,
        option(config, "report"),
        baseline,
        xfails_path,
        entries,
        max_examples,
        cache_dir,
        threads,
        shard,
    )


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``"K/N"`` -> (K, N) with 1 <= K <= N; None when not given. Anything else is a usage error."""
    if not value:
        return None
    try:
        k, n = (int(part) for part in value.split("/"))
        assert 1 <= k <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--hfexport-shard={value}: K/N with 1 <= K <= N, e.g. 2/4") from None
    return k, n


def load_hypothesis_profile(config: pytest.Config) -> None:
    profile = option(config, "hypothesis-profile")
    if profile:
        from hypothesis import settings as hsettings

        from . import strategies  # noqa: F401  (registers the profiles)

        try:
            hsettings.load_profile(profile)
        except Exception as exc:
            raise pytest.UsageError(f"--hfexport-hypothesis-profile={profile}: {exc}") from None


def settings_of(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS]


def report_header(config: pytest.Config) -> list[str]:
    if SETTINGS not in config.stash:
        return []
    from . import versions

    s = config.stash[SETTINGS]
    window = versions.environment().read_window()["packages"]
    parts = []
    for name, pinned in s.pins.items():
        got = versions.installed(name)
        if got is None:
            parts.append(f"{name} missing (pin {pinned})")
        elif versions.strip_local(got) != pinned:
            where = ""
            if name in window:
                low, high = window[name]["window"]
                inside = versions.environment().in_window(name, got)
                where = f", in window {low} to {high}" if inside else f"; OUTSIDE window {low} to {high}"
            parts.append(f"{name} {got} DRIFT (pin {pinned}{where})")
        else:
            parts.append(f"{name} {got}")
    return [
        f"hfexport: impl={s.impl} backends={','.join(s.backends)} device={s.device}"
        + (f" pins={s.pins_path}" if s.pins_path else ""),
        "hfexport versions: " + ", ".join(parts),
    ]

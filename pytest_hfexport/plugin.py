"""pytest_hfexport plugin: options, markers, fixtures and hooks. Thin: it wires the modules beside it.

Loading it must stay cheap: no torch, onnx or executorch import here or at configure time
(unless ``--hfexport-device=cuda`` asks for CUDA, which needs torch to check).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import backends as _backends

# -- options ----------------------------------------------------------------------------------------

OPTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("backend", "comma list of backends to test (dynamo, onnx, executorch) or 'all'; default: every backend whose "
                "packages are installed. A backend named here whose packages are missing is a usage error.", {}),
    ("impl", "implementation of the export API under test: hfexport (default), transformers "
             "(transformers.exporters), or a dotted module exposing the same API", {}),
    ("device", "device to export and run on: cpu (default), cuda or auto", {}),
    ("pins", "pins file (name==version lines) to compare installed versions with; default: hfexport's pins", {}),
    ("report", "write a JSON report here: one row per model x backend x check", {}),
    ("baseline", "an earlier JSON report: a row that passed there and fails now fails the session", {}),
    ("xfails", "known-failures file (TOML or JSON): test id or model/backend/check = reason; strict xfails", {}),
    ("max-examples", "hypothesis examples per shape check (default: the active hypothesis profile's)", {}),
    ("hypothesis-profile", "load a hypothesis profile: hfexport-ci (derandomized, few examples) or hfexport-dev", {}),
]
DEVICES = ("cpu", "cuda", "auto")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hfexport", "export models and compare with eager PyTorch (pytest_hfexport)")
    for name, help_text, extra in OPTIONS:
        dest = "hfexport_" + name.replace("-", "_")
        group.addoption(f"--hfexport-{name}", dest=dest, default=None, metavar=name.split("-")[-1].upper(),
                        help=help_text + f" [ini: {dest}]", **extra)
        parser.addini(dest, help_text, default=None)


def _opt(config: pytest.Config, name: str) -> str | None:
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

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


SETTINGS = pytest.StashKey[Settings]()
RECORDER = pytest.StashKey[Any]()
IDENTITY = pytest.StashKey[tuple]()
MEASUREMENTS = pytest.StashKey[list]()
MATCHED_XFAILS = pytest.StashKey[set]()


def _settings(config: pytest.Config) -> Settings:
    from . import implementations, versions, xfails

    try:
        backends = _backends.select(_opt(config, "backend"))
    except _backends.BackendSelectionError as exc:
        raise pytest.UsageError(str(exc)) from None
    impl = _opt(config, "impl") or "hfexport"
    if not implementations.exists(impl):
        raise pytest.UsageError(f"--hfexport-impl={impl}: no such module; use hfexport, transformers or a dotted "
                                "module path that exposes AutoExportConfig and AutoHfExporter")
    device = _opt(config, "device") or "cpu"
    if device not in DEVICES:
        raise pytest.UsageError(f"--hfexport-device={device}: choose one of {', '.join(DEVICES)}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError("--hfexport-device=cuda but CUDA is not available here; use cpu or auto")
    pins_path = _opt(config, "pins")
    try:
        pins = versions.read_pins(pins_path)
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--hfexport-pins: {exc}") from None
    baseline = _opt(config, "baseline")
    if baseline and not Path(baseline).exists():
        raise pytest.UsageError(f"--hfexport-baseline={baseline}: no such file")
    xfails_path = _opt(config, "xfails")
    entries = {}
    if xfails_path:
        try:
            entries = xfails.load(xfails_path)
        except xfails.XfailFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    max_examples = _opt(config, "max-examples")
    if max_examples is not None:
        try:
            max_examples = int(max_examples)
            assert max_examples > 0
        except (ValueError, AssertionError):
            raise pytest.UsageError(f"--hfexport-max-examples={max_examples}: a positive integer") from None
    return Settings(backends, impl, device, pins_path, pins, _opt(config, "report"), baseline, xfails_path, entries,
                    max_examples)


MARKERS = [
    "hfexport_backend(*names): run this test only on these backends (among the selected ones)",
    "requires_cuda: skip unless CUDA is available",
    "requires_pins(*packages, xfail=False): skip (or xfail) where installed versions of these packages (default: all "
    "pinned) differ from the pins",
    "hfexport_versions(xfail=False, **ranges): skip (or xfail) unless installed versions are in the ranges, "
    "e.g. torch='>=2.13'",
    "hfexport_slow: a slow export test (deselect with -m 'not hfexport_slow')",
    "hfexport_checks(argname, xfails): set by parametrize_with_checks",
    "dynamo: runs on the dynamo backend (added to parametrized tests)",
    "onnx: runs on the onnx backend (added to parametrized tests)",
    "executorch: runs on the executorch backend (added to parametrized tests)",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if config.option.help:
        return
    settings = _settings(config)
    config.stash[SETTINGS] = settings
    config.stash[MATCHED_XFAILS] = set()
    profile = _opt(config, "hypothesis-profile")
    if profile:
        from hypothesis import settings as hsettings

        from . import strategies  # noqa: F401  (registers the profiles)

        try:
            hsettings.load_profile(profile)
        except Exception as exc:
            raise pytest.UsageError(f"--hfexport-hypothesis-profile={profile}: {exc}") from None
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) writes the report
        from . import report, versions

        config.stash[RECORDER] = report.Recorder(
            settings.impl, versions.installed_versions(settings.pins),
            {"backends": settings.backends, "device": settings.device, "pins": settings.pins})
        config.pluginmanager.register(_Controller(config), "hfexport-controller")


def _get_settings(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS]


# -- header -----------------------------------------------------------------------------------------

def pytest_report_header(config: pytest.Config) -> list[str]:
    if SETTINGS not in config.stash:
        return []
    from . import versions

    s = config.stash[SETTINGS]
    parts = []
    for name, pinned in s.pins.items():
        got = versions.installed(name)
        if got is None:
            parts.append(f"{name} missing (pin {pinned})")
        elif versions.strip_local(got) != pinned:
            parts.append(f"{name} {got} DRIFT (pin {pinned})")
        else:
            parts.append(f"{name} {got}")
    return [f"hfexport: impl={s.impl} backends={','.join(s.backends)} device={s.device}"
            + (f" pins={s.pins_path}" if s.pins_path else ""),
            "hfexport versions: " + ", ".join(parts)]


# -- parametrization ----------------------------------------------------------------------------------

def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hfexport_backend" not in metafunc.fixturenames:
        return
    selected = _get_settings(metafunc.config).backends
    marker = metafunc.definition.get_closest_marker("hfexport_backend")
    chosen = selected
    if marker is not None:
        wanted = [b for arg in marker.args for b in (arg if isinstance(arg, (list, tuple)) else [arg])]
        chosen = [b for b in selected if b in wanted]
        if not chosen:
            metafunc.parametrize("hfexport_backend", [pytest.param(
                None, id="no-backend", marks=pytest.mark.skip(
                    reason=f"hfexport_backend{tuple(wanted)}: none of these is selected ({','.join(selected)})"))])
            return
    metafunc.parametrize("hfexport_backend",
                         [pytest.param(b, id=b, marks=getattr(pytest.mark, b)) for b in chosen])


def _identity(item: pytest.Item) -> tuple[str, str, str] | None:
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    from . import xfails

    settings = _get_settings(config)
    matched = config.stash[MATCHED_XFAILS]
    for item in items:
        identity = _identity(item)
        if identity is not None:
            item.stash[IDENTITY] = identity
        hit = xfails.find(settings.xfails, item.nodeid, identity) if settings.xfails else None
        source = settings.xfails_path
        marker = item.get_closest_marker("hfexport_checks")
        if hit is None and marker is not None and marker.kwargs.get("xfails"):
            hit = xfails.find(marker.kwargs["xfails"], item.nodeid, identity)
            source = "parametrize_with_checks"
        elif hit is not None:
            matched.add(hit[0])
        if hit is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known failure ({source}: {hit[0]}): {hit[1]}", strict=True))
    unmatched = [k for k in settings.xfails if k not in matched]
    if unmatched:
        warnings.warn(pytest.PytestWarning(
            f"hfexport: {len(unmatched)} known-failure entr{'y' if len(unmatched) == 1 else 'ies'} in "
            f"{settings.xfails_path} match no collected test: {', '.join(unmatched)}"))


# -- markers at setup ---------------------------------------------------------------------------------

def pytest_runtest_setup(item: pytest.Item) -> None:
    from . import versions

    if item.get_closest_marker("requires_cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("requires_cuda: CUDA is not available on this machine")
    settings = _get_settings(item.config)
    for marker in item.iter_markers("requires_pins"):
        names = list(marker.args) or None
        off = versions.drift(settings.pins, names)
        if off:
            text = ", ".join(f"{n} {got or 'missing'} (pin {pin})" for n, (pin, got) in off.items())
            _skip_or_xfail(marker, f"requires_pins: installed versions differ from the pins: {text}")
    for marker in item.iter_markers("hfexport_versions"):
        ranges = {k: v for k, v in marker.kwargs.items() if k != "xfail"}
        off = versions.outside(ranges)
        if off:
            text = ", ".join(f"{n} {got or 'missing'} not {spec}" for n, (spec, got) in off.items())
            _skip_or_xfail(marker, f"hfexport_versions: {text}")


def _skip_or_xfail(marker: Any, reason: str) -> None:
    if marker.kwargs.get("xfail"):
        pytest.xfail(reason)
    pytest.skip(reason)


# -- fixtures -----------------------------------------------------------------------------------------

@pytest.fixture
def hfexport_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test instance; tests that use it run once per selected backend (``[onnx]``)."""
    return request.param


@pytest.fixture(scope="session")
def hfexport_settings(pytestconfig: pytest.Config) -> Settings:
    return _get_settings(pytestconfig)


@pytest.fixture(scope="session")
def hfexport_implementation(hfexport_settings: Settings) -> Any:
    """The implementation of the API under test (``--hfexport-impl``)."""
    from . import implementations

    return implementations.resolve(hfexport_settings.impl)


@pytest.fixture(scope="session")
def hfexport_device(hfexport_settings: Settings) -> str:
    return hfexport_settings.resolved_device()


@pytest.fixture
def hfexport_harness(request: pytest.FixtureRequest, hfexport_backend: str, hfexport_implementation: Any,
                     hfexport_device: str, tmp_path: Path) -> Any:
    """Runs and records measurements for this test on its backend."""
    from .pipeline import Harness

    measurements = request.node.stash.setdefault(MEASUREMENTS, [])
    return Harness(hfexport_implementation, hfexport_backend, hfexport_device, tmp_path / "hfexport",
                   record=measurements.append)


@pytest.fixture
def hfexport_exporter(hfexport_harness: Any) -> Any:
    """An exporter of the implementation under test for this test's backend (``export``, ``save``)."""
    return hfexport_harness.exporter()


@pytest.fixture
def hfexport_config(hfexport_harness: Any) -> Any:
    """Factory: ``hfexport_config(dynamic=True)`` -> the backend's config of the implementation under test."""
    return hfexport_harness.config


@pytest.fixture
def export_and_compare(hfexport_harness: Any) -> Any:
    """``export_and_compare(model, inputs, other_inputs=None, tolerance=None, output_tolerance=None, **config)``
    -> a Measurement (per output: max abs/rel error, shapes, dtype, tolerance; stage, seconds). Raises on any
    failing stage, and ExportMismatch (an AssertionError) on a mismatch."""
    return hfexport_harness.export_and_compare


@pytest.fixture
def assert_exportable(hfexport_harness: Any) -> Any:
    """``assert_exportable(model, inputs, other_inputs=None, **config)``: fails naming the output, shapes, error
    and tolerance."""

    def check(model: Any, inputs: Any, other_inputs: Any = None, **kwargs: Any) -> None:
        __tracebackhide__ = True
        hfexport_harness.export_and_compare(model, inputs, other_inputs, **kwargs)

    return check


# -- binding checks, recording rows --------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    marker = pyfuncitem.get_closest_marker("hfexport_checks")
    if marker is not None:
        from .downstream import BoundCheck, CheckCase

        argname = marker.kwargs.get("argname", "check")
        value = pyfuncitem.funcargs.get(argname)
        if isinstance(value, CheckCase):
            pyfuncitem.funcargs[argname] = BoundCheck(value.case, value.check, pyfuncitem.funcargs["hfexport_harness"],
                                                      _get_settings(pyfuncitem.config))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    identity = item.stash.get(IDENTITY, None)
    if identity is not None:
        measurements = item.stash.get(MEASUREMENTS, [])
        summaries = [m.summary() for m in measurements]
        failing = [s for s in summaries if s["stage"]]
        stage = failing[-1]["stage"] if failing else None
        message = failing[-1]["message"] if failing else ""
        if call.excinfo is not None and not stage:
            stage = getattr(call.excinfo.value, "stage", None)
        report.hfexport = {"model": identity[0], "backend": identity[1], "check": identity[2], "stage": stage,
                           "message": message, "measurements": summaries if call.when == "call" else []}
    return report


class _Controller:
    """Registered on the controller only: gathers rows (xdist workers' included) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.config.stash[RECORDER].add(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from . import report as report_mod

        settings, recorder = _get_settings(self.config), self.config.stash[RECORDER]
        if settings.baseline:
            recorder.compare_baseline(report_mod.load_baseline(settings.baseline))
            if recorder.regressions and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if settings.report:
            recorder.write(settings.report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from . import report as report_mod

        settings, recorder = _get_settings(self.config), self.config.stash[RECORDER]
        tr = terminalreporter
        if recorder.rows:
            tr.write_sep("=", "hfexport matrix")
            for line in recorder.matrix_lines(settings.backends):
                tr.write_line(line)
            for line in report_mod.count_table(recorder.merged().values()):
                tr.write_line(line)
            counts = ", ".join(f"{n} {s}" for s, n in recorder.counts().items() if n)
            tr.write_line(f"rows: {counts}")
            stages = recorder.by_stage()
            if stages:
                tr.write_line("failures by stage: " + ", ".join(f"{s}: {n}" for s, n in stages.items()))
        if settings.baseline:
            tr.write_sep("=", f"hfexport baseline {settings.baseline}")
            for row, before in recorder.regressions:
                tr.write_line(f"REGRESSION {'/'.join(row.key)}: {before.get('status')} -> {row.status}"
                              + (f" [{row.stage}]" if row.stage else "") + f" {row.nodeid}", red=True)
            for row, before in recorder.improvements:
                tr.write_line(f"improvement {'/'.join(row.key)}: {before.get('status')} -> {row.status}", green=True)
            if recorder.not_run:
                tr.write_line(f"{len(recorder.not_run)} baseline row(s) that passed were not run this time")
            tr.write_line(f"{len(recorder.regressions)} regression(s), {len(recorder.improvements)} improvement(s)")
        if settings.report:
            tr.write_line(f"hfexport report: {settings.report}")



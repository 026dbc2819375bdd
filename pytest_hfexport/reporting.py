"""Report rows from test outcomes (under xdist too), the terminal matrix and the baseline gate."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from .fixtures import MEASUREMENTS
from .selection import IDENTITY
from .settings import settings_of

RECORDER = pytest.StashKey[Any]()
# Every comparison a test made (``compare.observing``): the errors and tolerance of its row, passes included.
COMPARISONS = pytest.StashKey[list]()
# Every module the locator named after a mismatch inside the test (``localise.observing``).
DIVERGENCES = pytest.StashKey[list]()


@contextlib.contextmanager
def observe_verdicts(item: pytest.Item) -> Iterator[None]:
    """A context for the test's call: every ``compare`` verdict inside it, and every divergence the locator
    found, land on the item's row."""
    from . import compare, localise

    comparisons = item.stash.setdefault(COMPARISONS, [])
    divergences = item.stash.setdefault(DIVERGENCES, [])
    with compare.observing(lambda result: comparisons.append(result.measured())):
        with localise.observing(lambda found: divergences.append(found.to_dict())):
            yield


def attach_row_facts(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """Put the row's facts on the report (a plain dict, so xdist carries it to the controller)."""
    key = item.stash.get(IDENTITY, None)
    if key is None:
        return
    summaries = [m.summary() for m in item.stash.get(MEASUREMENTS, [])]
    failing = [s for s in summaries if s["stage"]]
    stage = failing[-1]["stage"] if failing else None
    message = failing[-1]["message"] if failing else ""
    if call.excinfo is not None and not stage:
        stage = getattr(call.excinfo.value, "stage", None)
    adapter = getattr(item, "funcargs", {}).get("hfexport_implementation")
    gaps = adapter.declared_gaps() if adapter is not None and hasattr(adapter, "declared_gaps") else {}
    report.hfexport = {  # type: ignore[attr-defined]
        "model": key[0],
        "backend": key[1],
        "check": key[2],
        "stage": stage,
        "message": message,
        "measurements": summaries if call.when == "call" else [],
        "comparisons": item.stash.get(COMPARISONS, []) if call.when == "call" else [],
        "divergences": item.stash.get(DIVERGENCES, []) if call.when == "call" else [],
        "declared_gaps": gaps,
    }


def start_recording(config: pytest.Config) -> None:
    """On the controller (or a run without xdist): gather every row and write the report at the end."""
    if hasattr(config, "workerinput"):
        return
    from . import report, versions

    settings = settings_of(config)
    config.stash[RECORDER] = report.Recorder(
        settings.impl,
        versions.installed_versions(settings.pins),
        {
            "backends": settings.backends,
            "device": settings.device,
            "pins": settings.pins,
            # The run as typed (after pytest's own name), so a figure quoted from the report names its command;
            # quoted for a shell (an empty marker expression, `-m ""`, would vanish when joined plainly).
            "command": "python -m pytest " + shlex.join(map(str, config.invocation_params.args)),
        },
    )
    config.pluginmanager.register(_Controller(config), "hfexport-controller")


class _Controller:
    """Registered on the controller only: gathers rows (xdist workers' included) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.config.stash[RECORDER].start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.config.stash[RECORDER].add(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from . import report as report_mod

        settings, recorder = settings_of(self.config), self.config.stash[RECORDER]
        recorder.finish()
        if settings.baseline:
            baseline = report_mod.load_baseline(settings.baseline)
            if settings.shard is not None:  # a shard answers for its own rows only
                from .selection import shard_of

                k, n = settings.shard
                baseline = {key: r for key, r in baseline.items() if shard_of(str(r.get("nodeid", "")), n) == k}
            gate = recorder.compare_baseline(baseline)
            if gate.failed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if settings.report:
            recorder.write(settings.report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from . import report as report_mod

        settings, recorder = settings_of(self.config), self.config.stash[RECORDER]
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
            for capability, reason in recorder.declared_gaps.items():
                tr.write_line(f"declared gap of {settings.impl}: {capability}: {reason}")
        if settings.baseline and recorder.gate is not None:
            tr.write_sep("=", f"hfexport baseline {settings.baseline}")
            gate = recorder.gate
            for line in gate.summary_lines():
                tr.write_line(line, red=gate.failed)
            for colour, line in gate.row_lines():
                tr.write_line(line, **({colour: True} if colour else {}))
            tr.write_line(gate.count_line())
        if settings.report:
            tr.write_line(f"hfexport report: {settings.report}")

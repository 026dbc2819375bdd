"""The coverage sweep's fixtures: the tiny model of an architecture (built once per worker while its cells run),
and the per-cell time limit. The options and the parametrization live in ``conformance.coverage.collect``."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.coverage import collect
from conformance.coverage.build import Built, NotBuildable, build
from conformance.coverage.cells import CellTimeout
from conformance.coverage.enumerate import Architecture

# The last architecture built on this worker: its checks on one backend run one after another (one xdist group).
_LAST: dict[str, Built | NotBuildable] = {}


@pytest.hookimpl(trylast=True)  # after the plugin's backend axis: ids read [backend-architecture], as the zoo's do
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collect.parametrize(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collect.deselect(config, items)


@pytest.fixture
def built() -> Callable[[Architecture], Built]:
    """``built(architecture)``: the tiny model and inputs; an architecture the suite cannot build tiny skips with
    ``not buildable: stage: reason`` (the suite's limit: no export was tried, so nothing is judged)."""

    def get(arch: Architecture) -> Built:
        if arch.name not in _LAST:
            _LAST.clear()
            try:
                _LAST[arch.name] = build(arch)
            except NotBuildable as exc:
                _LAST[arch.name] = exc
        result = _LAST[arch.name]
        if isinstance(result, NotBuildable):
            pytest.skip(f"not buildable: {result.stage}: {result.reason}")
        return result

    return get


@pytest.fixture
def time_limit(pytestconfig: pytest.Config) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """``with time_limit():`` fails the cell at stage ``timeout`` after ``--coverage-timeout`` seconds
    (``cells.CellTimeout``). A signal alarm in the test's own thread: it interrupts Python code (a native call
    returns first), and where tests do not run on the main thread (pytest-xdist runs them there) it cannot be set,
    so there is no limit there."""
    seconds = float(pytestconfig.getoption("coverage_timeout", collect.DEFAULT_TIMEOUT) or 0)

    @contextlib.contextmanager
    def limit() -> Iterator[None]:
        if seconds <= 0 or threading.current_thread() is not threading.main_thread():
            yield
            return

        def overran(signum: int, frame: Any) -> None:
            raise CellTimeout(f"timeout: the cell ran past {seconds:g} s (--coverage-timeout)")

        previous = signal.signal(signal.SIGALRM, overran)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return limit

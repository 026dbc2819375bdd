"""pytest_hfexport's hooks, in one place; each delegates to the module that does the work:
``settings`` (options, markers, the validated settings), ``worker_threads`` (torch threads per xdist worker),
``selection`` (the backend axis, report keys, known failures, version markers), ``fixtures``, ``reporting``
(rows, matrix, baseline gate) and ``xdist_groups`` (``--dist loadgroup`` that keeps each group on one worker).

Loading it stays cheap: nothing here imports torch, onnx or executorch (an xdist worker, which imports them to
run its tests anyway, sets torch's thread count at configure time).
"""

from __future__ import annotations

from typing import Any

import pytest

from . import backends, reporting, selection, settings, worker_exit, worker_threads, xdist_groups
from .fixtures import (  # noqa: F401  (fixtures are found by name in this module)
    assert_exportable,
    export_and_compare,
    hfexport_artifact_cache,
    hfexport_backend,
    hfexport_config,
    hfexport_device,
    hfexport_exporter,
    hfexport_harness,
    hfexport_implementation,
    hfexport_settings,
)
from .settings import SETTINGS, pytest_addoption  # noqa: F401

RECORDER = reporting.RECORDER


def pytest_configure(config: pytest.Config) -> None:
    for line in settings.MARKERS:
        config.addinivalue_line("markers", line)
    xdist_groups.register(config)
    if config.option.help:
        return
    config.stash[SETTINGS] = settings.read_settings(config)
    for backend in config.stash[SETTINGS].backends:  # a backend the implementation registers gets its marker too
        if backend not in backends.BACKENDS:
            config.addinivalue_line("markers", f"{backend}: runs on the {backend} backend")
    worker_threads.apply(config, config.stash[SETTINGS].worker_threads)
    if worker_exit.is_worker(config):
        config.pluginmanager.register(worker_exit, "hfexport-worker-exit")
    settings.load_hypothesis_profile(config)
    reporting.start_recording(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return settings.report_header(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    selection.parametrize_backends(metafunc)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test none of whose backends is selected is deselected, not skipped.
    unbound = [
        i
        for i in items
        if "hfexport_backend" in getattr(i, "fixturenames", ())
        and not isinstance(getattr(getattr(i, "callspec", None), "params", {}).get("hfexport_backend"), str)
    ]
    if unbound:
        config.hook.pytest_deselected(items=unbound)
        items[:] = [i for i in items if i not in unbound]
    selection.apply_known_failures(config, items)
    selection.apply_shard(config, items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    selection.check_markers(item)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    marker = pyfuncitem.get_closest_marker("hfexport_checks")
    if marker is not None:
        from .downstream import BoundCheck, CheckCase

        argname = marker.kwargs.get("argname", "check")
        value = pyfuncitem.funcargs.get(argname)
        if isinstance(value, CheckCase):
            pyfuncitem.funcargs[argname] = BoundCheck(
                value.case,
                value.check,
                pyfuncitem.funcargs["hfexport_harness"],
                settings.settings_of(pyfuncitem.config),
            )
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with reporting.observe_verdicts(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    reporting.attach_row_facts(item, call, report)
    return report

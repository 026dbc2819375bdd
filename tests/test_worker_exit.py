"""A pytest-xdist worker collects its garbage before xdist reports it finished (``pytest_hfexport.worker_exit``):
execnet interrupts a worker still running 5 s after its gateway is closed, and the interrupt landed in a gc callback
("Exception ignored in: gc_callback ... KeyboardInterrupt" at the end of a green ``make run``)."""

import gc
import types

from pytest_hfexport import worker_exit


def session(worker: bool):
    config = types.SimpleNamespace(workerinput={"workerid": "gw0"} if worker else None)
    return types.SimpleNamespace(config=config)


def test_a_worker_collects_and_freezes_before_it_reports(monkeypatch):
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    worker_exit.pytest_sessionfinish(session(worker=True), 0)
    assert calls == ["collect", "freeze"]
    assert worker_exit.pytest_sessionfinish.pytest_impl["tryfirst"]  # before xdist's wrapper sends workerfinished


def test_the_users_own_process_is_left_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    worker_exit.pytest_sessionfinish(session(worker=False), 0)
    assert calls == []

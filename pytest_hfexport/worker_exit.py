"""A pytest-xdist worker frees its memory before it reports its session finished.

When every worker has reported, xdist's controller closes their gateways, and execnet gives a worker 5 seconds to
end before it sends the worker a SIGINT. A worker that has run the suite's exports holds gigabytes of programs,
and the interpreter's last garbage collections over them can outlast that: the interrupt then lands inside a
garbage-collector callback (hypothesis times collections) and the run ends with ``Exception ignored in:
gc_callback ... KeyboardInterrupt`` on the terminal, after every test passed. Collecting here, before xdist's
own ``pytest_sessionfinish`` sends ``workerfinished``, does that work while no clock runs; ``gc.freeze()`` keeps
later collections off the objects that survive.
"""

from __future__ import annotations

import gc
import logging

import pytest

logger = logging.getLogger(__name__)


def is_worker(config: pytest.Config) -> bool:
    return getattr(config, "workerinput", None) is not None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not is_worker(session.config):
        return  # the user's own process: its memory is its business
    freed = gc.collect()
    gc.freeze()
    logger.debug("worker collected %d objects before reporting finished", freed)

"""``--dist loadgroup`` that keeps every ``xdist_group`` on one worker, without renaming tests.

pytest-xdist implements ``loadgroup`` by appending ``@group`` to each test's node id on the worker, and its
scheduler reads the group back from that suffix. pytest 9.2 builds node ids from a structured id that xdist
does not touch, so the suffix never appears: every grouped test becomes a work unit of its own and is spread
over all the workers, silently. A suite that groups the checks of one model so that they share one export then
exports it once per worker, or waits for another worker's export of the same artifact.

This module passes the groups on a side channel instead. Each worker writes ``{node id: group}`` for the tests
it collected into a folder the controller named in its ``workerinput``; the controller's scheduler (xdist's
``LoadScopeScheduling``, with the scope of a test taken from those files) reads them once every worker has
collected, which xdist guarantees before it schedules anything. Tests without a group stay units of their own,
as in xdist's ``loadgroup``; a node id that xdist itself suffixed (older pytest) is read from the same files,
so both behave alike.

Active only under ``--dist loadgroup`` with pytest-xdist installed; ``-p no:hfexport-xdist-groups`` gives xdist's
own scheduler back.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

PLUGIN_NAME = "hfexport-xdist-groups"
WORKER_INPUT_KEY = "hfexport_xdist_groups"
_DIRECTORY = pytest.StashKey[Path]()


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    """``{node id: group}`` for the items with ``xdist_group`` marks (several marks join, sorted, as in xdist)."""
    groups: dict[str, str] = {}
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if names:
            groups[item.nodeid] = "_".join(sorted(names))
    return groups


def read_groups(directory: Path) -> dict[str, str]:
    """Every worker's groups, merged (they collected the same tests, or xdist refuses to schedule)."""
    groups: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        groups.update(json.loads(path.read_text()))
    return groups


def make_scheduler_class() -> type:
    """xdist's scope scheduler with the scope read from the workers' group files (imported only under xdist)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """One work unit per ``xdist_group`` (and one per ungrouped test), largest units first."""

        def __init__(self, config: pytest.Config, log: Any, directory: Path) -> None:
            super().__init__(config, log)
            self.directory = directory
            self.groups: dict[str, str] | None = None

        def schedule(self) -> None:
            if self.groups is None:
                self.groups = read_groups(self.directory)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            group = (self.groups or {}).get(nodeid)
            return f"group:{group}" if group is not None else nodeid

    return GroupScheduling


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    directory = config.stash.get(_DIRECTORY, None)
    return None if directory is None else make_scheduler_class()(config, log, directory)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    directory = node.config.stash.get(_DIRECTORY, None)
    if directory is not None:
        node.workerinput[WORKER_INPUT_KEY] = str(directory)


@pytest.hookimpl(trylast=True)  # after every hook that adds groups (and after xdist's own, which may rename)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", {})
    folder = workerinput.get(WORKER_INPUT_KEY)
    if folder:  # read by the controller only once this worker has reported its collection: a plain write serves
        (Path(folder) / f"{workerinput['workerid']}.json").write_text(json.dumps(groups_of(items)))


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_DIRECTORY, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def register(config: pytest.Config) -> None:
    """Register these hooks where pytest-xdist is installed (its hook specs are what they implement). The
    controller of a ``--dist loadgroup`` run names the folder now: its workers get it when they start, before
    the scheduler exists."""
    manager = config.pluginmanager
    if not manager.hasplugin("xdist") or manager.is_blocked(PLUGIN_NAME) or manager.has_plugin(PLUGIN_NAME):
        return
    manager.register(sys.modules[__name__], PLUGIN_NAME)
    controller = not hasattr(config, "workerinput")
    if controller and config.getvalue("dist") == "loadgroup" and config.getvalue("numprocesses"):
        config.stash[_DIRECTORY] = Path(tempfile.mkdtemp(prefix="hfexport-xdist-groups-"))

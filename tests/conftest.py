"""The order the default test run hands tests to its two workers: the modules measured slowest first
(``pytest -n 2 --durations=40``), so that no long test starts last and leaves one worker alone at the end."""

from __future__ import annotations

import pytest

# Modules whose tests run an export suite, a subprocess pytest run or an ExecuTorch lowering of several seconds.
SLOW_MODULES = (
    "test_suite_catches_faults.py",
    "test_model_repo_checks.py",
    "test_recipes.py",
    "test_decode_graph_copies.py",
    "test_cli.py",
    "test_executorch_one_trace.py",
    "test_executorch.py",
    "test_executorch_decode.py",
    "test_executorch_lowering.py",
    "test_generation.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOW_MODULES.index(name) if name in SLOW_MODULES else len(SLOW_MODULES)

    items.sort(key=rank)  # stable: each module keeps its own order

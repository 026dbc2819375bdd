"""The suite's shared fixtures: each zoo entry is exported once per backend and reused by every check.

The suite talks to the API only through the plugin's implementation adapter
(``hfexport_implementation``), so ``--hfexport-impl=transformers`` judges the peer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.zoo import ZooEntry, select

KNOWN_FAILURES = Path(__file__).parent / "known_failures"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hfexport_case(model, check): the zoo entry and check a test measures "
                                       "(the report's model/backend/check key)")


def entry_params(check: str, names: tuple[str, ...] | None = None) -> list[Any]:
    """pytest params over the zoo entries that opt into ``check`` (or the given names), tagged for the report."""
    entries = select(list(names)) if names else select(check=check)
    return [pytest.param(entry, id=entry.name, marks=[pytest.mark.hfexport_case(entry.name, check)])
            for entry in entries]


@dataclass
class Exported:
    entry: ZooEntry
    model: Any
    sample: dict
    program: Any = None
    path: Path | None = None
    runner: Any = None
    seconds: float = 0.0
    error: BaseException | None = None
    extra: dict = field(default_factory=dict)


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"dir": tmp_path_factory.mktemp("conformance")}


@pytest.fixture
def exported(export_cache: dict, hfexport_implementation: Any, hfexport_backend: str):
    """exported(entry) -> Exported: plain dynamic export, saved and loaded back, cached per session."""

    def get(entry: ZooEntry) -> Exported:
        key = (hfexport_implementation.name, hfexport_backend, entry.name)
        if key not in export_cache:
            model = entry.model()
            result = Exported(entry, model, entry.sample_inputs(model))
            try:
                exporter = hfexport_implementation.exporter(hfexport_backend)
                config = hfexport_implementation.config(hfexport_backend, dynamic=True)
                start = time.perf_counter()
                result.program = hfexport_implementation.export(exporter, model, result.sample, config)
                result.seconds = time.perf_counter() - start
                directory = export_cache["dir"] / f"{key[0]}-{key[1]}"
                directory.mkdir(exist_ok=True)
                result.path = hfexport_implementation.save(exporter, result.program, directory, entry.name)
                result.runner = hfexport_implementation.load(result.path)
            except BaseException as exc:  # cached too: the next check of this entry fails the same way, fast
                result.error = exc
            export_cache[key] = result
        result = export_cache[key]
        if result.error is not None:
            raise result.error
        return result

    return get

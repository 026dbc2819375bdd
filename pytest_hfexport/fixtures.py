"""The fixtures a model repo (and the conformance suite) uses: the backend of a test, the implementation
under test (an adapter), config factories and the export-and-compare harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .settings import Settings, settings_of

MEASUREMENTS = pytest.StashKey[list]()


@pytest.fixture
def hfexport_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test instance; tests that use it run once per selected backend (``[onnx]``)."""
    return request.param


@pytest.fixture(scope="session")
def hfexport_settings(pytestconfig: pytest.Config) -> Settings:
    return settings_of(pytestconfig)


@pytest.fixture(scope="session")
def hfexport_implementation(hfexport_settings: Settings) -> Any:
    """The implementation of the API under test (``--hfexport-impl``), behind its adapter."""
    from . import adapters

    return adapters.resolve(hfexport_settings.impl)


@pytest.fixture(scope="session")
def hfexport_device(hfexport_settings: Settings) -> str:
    return hfexport_settings.resolved_device()


@pytest.fixture(scope="session")
def hfexport_artifact_cache(hfexport_settings: Settings) -> Any:
    """The artifact cache (``pytest_hfexport.artifact_cache.ArtifactCache``), or None under --hfexport-no-cache."""
    from .artifact_cache import ArtifactCache

    return ArtifactCache(hfexport_settings.cache_dir) if hfexport_settings.cache_dir else None


@pytest.fixture
def hfexport_harness(
    request: pytest.FixtureRequest,
    hfexport_backend: str,
    hfexport_implementation: Any,
    hfexport_device: str,
    hfexport_artifact_cache: Any,
    tmp_path: Path,
) -> Any:
    """Runs and records measurements for this test on its backend."""
    from .pipeline import Harness

    measurements = request.node.stash.setdefault(MEASUREMENTS, [])
    return Harness(
        hfexport_implementation,
        hfexport_backend,
        hfexport_device,
        tmp_path / "hfexport",
        record=measurements.append,
        cache=hfexport_artifact_cache,
    )


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
    and tolerance. With ``dynamic=True`` and no ``other_inputs``, it also runs the artifact at batch 2 and at
    another sequence length built from the sample (a program exported static fails)."""

    def check(model: Any, inputs: Any, other_inputs: Any = None, **kwargs: Any) -> None:
        __tracebackhide__ = True
        if other_inputs is None and kwargs.get("dynamic"):
            from .strategies import away_from_sample

            other_inputs = away_from_sample(inputs)
        hfexport_harness.export_and_compare(model, inputs, other_inputs, **kwargs)

    return check

"""The contract between the judge and an implementation of the export API.

The plugin and the conformance suite never call an implementation directly: they
call an ``Adapter``. It exports (``config``, ``exporter``, ``export``,
``export_for_generation``) and it owns the artifact contract: ``save`` and ``load``
(a runner: eager keyword arguments in, flat named outputs out, named as
``pytest_hfexport.naming`` names them), ``raw_artifact`` (the backend file, to be
driven with the backend's own runtime), ``decode_loop`` (the implementation's
loop over a saved static-cache decode artifact) and ``serve`` (the model's own
``generate()`` with components served by artifacts).

What an implementation lacks it declares in ``lacks``: capability -> reason, or
``capability/backend`` -> reason. ``require`` is the only place that raises
``Unsupported``; an exception raised anywhere else is a failure, whatever its type
or text, and every declared gap is listed in the report.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

UNSUPPORTED_PREFIX = "unsupported: "

# Component name -> saved artifact, as an adapter's generation export returns them.
ComponentPaths = Mapping[str, Path]
# Keyword arguments of a model call (input_ids, attention_mask, pixel_values, ...).
ModelInputs = Mapping[str, Any]

# Every capability a check may require, and what it means.
CAPABILITIES: dict[str, str] = {
    "export": "export a model traced on sample inputs, save the artifact and load it back",
    "export_for_generation": "split a generative model into components and export each",
    "multi_token_decode": "a decode graph whose query axis stays symbolic (1 or k tokens per call)",
    "static_cache": "a decode graph over a fixed-length cache updated in place",
    "decode_loop": "the implementation's own greedy loop over a saved static-cache decode artifact, reporting where "
    "the runtime wrote the cache",
    "decode_loop_in_place": "that loop has the runtime write the cache into memory the caller owns",
    "serve": "the model's own generate() with every component served by its artifact",
    "quantization": "export with a config's weight quantization scheme (int8 on every backend, int4 on ONNX, 8da4w and "
    "8da8w on ExecuTorch; pytest_hfexport.quantized_reference defines each)",
    "config_dict": "configs round-trip through to_dict/from_dict and JSON",
    "registration": "register a new exporter and config so the Auto classes dispatch to them",
    "environment": "validate_environment: missing packages raise, drift warns",
}


class Unsupported(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """A capability the implementation under test declares it lacks (never raised for anything else)."""

    def __init__(self, reason: str) -> None:
        super().__init__(UNSUPPORTED_PREFIX + reason, allow_module_level=False)


@contextlib.contextmanager
def tolerant_logging() -> Iterator[None]:
    """torch.export.load logs a record with a malformed format string when it falls back from a weights-only
    load; plain Python prints "--- Logging error ---" and goes on, pytest's log capture raises it instead.
    Loading an artifact must behave as it does for a user, so errors inside logging are not raised here."""
    previous = logging.raiseExceptions
    logging.raiseExceptions = False
    try:
        yield
    finally:
        logging.raiseExceptions = previous


# A loaded artifact: the eager model's keyword arguments in (tensors, caches, nested outputs), outputs out
# (flat named, or a structure the judge flattens with ``pytest_hfexport.naming.flat_named``).
Runner = Callable[..., Any]


class DecodeLoop(Protocol):
    """The implementation's own loop over a static-cache decode artifact (what ``Adapter.decode_loop`` returns).

    ``step`` runs the graph once with exactly the guide's inputs; ``cache_tensors`` are the cache tensors the
    caller sees after that step (flat names); ``runtime_writes`` says, for each cache tensor the runtime wrote
    in that step, the address it wrote to, read from the runtime's own output objects (an ONNX Runtime
    IOBinding's outputs, an ExecuTorch method's returned or owned tensors, the tensors of the cache object a
    torch module mutated), never from the loop's bookkeeping."""

    max_cache_len: int

    def reset(self, batch: int = 1) -> None: ...

    def step(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> Any: ...

    def cache_tensors(self) -> dict[str, Any]: ...

    def runtime_writes(self) -> dict[str, int]: ...


def callers_mapping(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's own dict (a copy only of another kind of mapping): an implementation under test gets what a
    user would hand it, so a change it makes to the mapping is a change the checks can see."""
    return inputs if isinstance(inputs, dict) else dict(inputs)


class Adapter:
    """One implementation of the export API, as the judge sees it. Subclasses fill in the methods."""

    name: str = ""
    # capability or "capability/backend" -> why the implementation lacks it.
    lacks: Mapping[str, str] = {}

    # -- capabilities ------------------------------------------------------------------------------
    def declared_gap(self, capability: str, backend: str | None = None) -> str | None:
        if capability not in CAPABILITIES:
            raise KeyError(f"unknown capability {capability!r}; capabilities: {sorted(CAPABILITIES)}")
        for key in ([f"{capability}/{backend}"] if backend else []) + [capability]:
            if key in self.lacks:
                return self.lacks[key]
        return None

    def require(self, capability: str, backend: str | None = None) -> None:
        """Raise Unsupported when (and only when) the implementation declares it lacks ``capability``."""
        gap = self.declared_gap(capability, backend)
        if gap is not None:
            where = f"{capability}/{backend}" if backend else capability
            raise Unsupported(f"{self.name} declares it lacks {where}: {gap}")

    def declared_gaps(self) -> dict[str, str]:
        return dict(self.lacks)

    def backends(self) -> dict[str, dict[str, Any]]:
        """The backends the implementation registers: name -> ``packages`` (import names), ``suffix`` and
        ``tolerance`` ((atol, rtol) of float32 outputs, as the implementation declares them). Read only for a
        backend the judge does not know itself (``pytest_hfexport.backends.select``)."""
        return {}

    # -- identity ----------------------------------------------------------------------------------
    def version(self) -> str:
        raise NotImplementedError

    def api(self) -> Any:
        """The implementation's public API namespace (AutoExportConfig, AutoHfExporter, HfExporter, configs...)."""
        raise NotImplementedError

    # -- exporting ---------------------------------------------------------------------------------
    def config(self, backend: str, /, **fields: Any) -> Any:
        raise NotImplementedError

    def exporter(self, backend: str) -> Any:
        raise NotImplementedError

    def export(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any) -> Any:
        """The caller's mapping itself goes to the implementation (``callers_mapping``): hygiene must see an export
        that adds, removes or replaces its keys."""
        return exporter.export(model, callers_mapping(inputs), config=config)

    def export_for_generation(
        self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any, **options: Any
    ) -> dict[str, Any]:
        """{component name: program}."""
        return dict(exporter.export_for_generation(model, callers_mapping(inputs), config, **options))

    # -- artifacts ---------------------------------------------------------------------------------
    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        raise NotImplementedError

    def load(self, path: Path) -> Runner:
        raise NotImplementedError

    def runner_for(self, program: Any, backend: str) -> Runner:
        """A runner over an in-memory program (no save/load round trip)."""
        raise NotImplementedError

    def raw_artifact(self, path: Path) -> Path:
        """The backend file behind a saved artifact (.pt2, .onnx, .pte), loadable with the backend's own runtime
        once this returns (any pytree registration it needs is done)."""
        return Path(path)

    def decode_loop(self, path: Path, backend: str, max_cache_len: int) -> DecodeLoop:
        raise NotImplementedError

    def serve(
        self, model: Any, paths: ComponentPaths, inputs: ModelInputs, new_tokens: int, generation_config: Any = None
    ) -> Any:
        """Greedy new tokens of ``model.generate(**inputs)`` with every component served by its saved artifact.

        ``paths`` maps each component name (as ``export_for_generation`` names it) to its saved artifact."""
        raise NotImplementedError

    # -- API ---------------------------------------------------------------------------------------
    def config_to_dict(self, config: Any) -> dict[str, Any]:
        return config.to_dict()

    def config_from_dict(self, data: Mapping[str, Any]) -> Any:
        return self.api().AutoExportConfig.from_dict(dict(data))

    def register_backend(self, name: str, exporter_cls: type, config_cls: type) -> None:
        raise NotImplementedError

    def unregister_backend(self, name: str) -> None:
        raise NotImplementedError

    def environment_checker(self, backend: str) -> Callable[[], Any]:
        """The backend exporter's environment check, on a fresh subclass of its exporter class, so state the
        implementation keeps per class (a drift warned once) starts empty; call it as often as needed."""
        cls = type(self.exporter(backend))
        fresh: Any = type(f"Fresh{cls.__name__}", (cls,), {})
        method = fresh.validate_environment
        if getattr(method, "__self__", None) is fresh:  # a classmethod, bound to the fresh class
            return method
        instance: Any = fresh.__new__(fresh)  # an instance method: on an instance built without __init__
        return lambda: instance.validate_environment()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

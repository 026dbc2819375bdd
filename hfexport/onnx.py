"""OnnxExporter: a transformers model to a ``torch.onnx.ONNXProgram`` that ONNX Runtime runs as is.

Its trace stage (``tracing.Trace`` with the ``"dynamo"`` and ``"onnx"`` patch sets) gives an ExportedProgram, traced
straight into the ATen IR that torch.onnx's decompositions would give (``decomposed_trace``: one trace, not a trace
and a retrace); then the lowering:

1. torch.onnx's preparation of the decomposed program (explicit type promotion, no assertion nodes);
2. FX node fixes registered for ``"onnx"`` on the decomposed graph;
3. translation to ONNX IR; the cache writes that torch.export records as input
   mutations become graph outputs (torch.onnx drops them), so a static cache can
   be updated in place by binding ``input.X`` and ``output.X`` to one buffer;
4. opset conversion, the onnxscript optimizer, ONNX IR post-fixes;
5. flat names: inputs as ``flatten_named(sample inputs)`` names them, outputs as
   ``flatten_named(eager output)`` does, ``input.``/``output.`` where they clash (``onnx_names``);
6. ``export_params`` / ``keep_initializers_as_inputs`` applied to the returned
   model itself (torch.onnx applies them only when it writes a file);
7. ``output_path``: written atomically (``.onnx`` + ``.onnx_data``).

Every workaround lives in a registry (``hfexport.patching``, ``hfexport.patching.onnx_fixes``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from . import decomposed_trace, onnx_names
from .base import HfExporter
from .configs import ExportConfigMixin, ExportFormat, OnnxConfig
from .errors import HfExportError
from .graph_inputs import split_inputs
from .io import atomic_output
from .outputs import flatten_named, spec_leaf_names
from .patching import (
    apply_fx_node_fixes,
    apply_fx_program_fixes,
    onnx_fixes,
    onnx_rms_norm,  # noqa: F401 (registers its IR fix)
    onnx_tied_weights,  # noqa: F401 (registers its IR fix)
)
from .quantization import quantize_onnx_graph
from .registry import register_exporter
from .tracing import Trace

logger = logging.getLogger(__name__)

# The exporter emits opset 18 ops (torchlib) and converts up with onnxscript's version converter.
MIN_OPSET = 18
# Attribute on the returned ONNXProgram: the config's external_data choice, used by ``save``.
_EXTERNAL_DATA_ATTR = "_hfexport_external_data"


def newest_opset() -> int:
    """The newest opset this environment can export to.

    The onnxscript version converter's ceiling: above it the converter gives up silently and leaves a
    model that declares opset 18 but holds newer ops (ORT then refuses it), so that is the real limit,
    not onnx's own newest opset.
    """
    import onnx

    try:
        from onnxscript.version_converter._version_converter import SUPPORTED_MAX_ONNX_OPSET
    except ImportError:  # pragma: no cover - older/newer onnxscript
        SUPPORTED_MAX_ONNX_OPSET = MIN_OPSET
    return int(min(SUPPORTED_MAX_ONNX_OPSET, onnx.defs.onnx_opset_version()))


def resolve_opset(requested: int | None) -> int:
    """None -> newest supported; an explicit version is honoured or refused with what to use instead."""
    newest = newest_opset()
    if requested is None:
        return newest
    if requested < MIN_OPSET or requested > newest:
        raise HfExportError(
            f"opset_version={requested} is outside what this environment can export ({MIN_OPSET}..{newest}: "
            "torchlib emits opset 18, and onnxscript's version converter stops at "
            f"{newest}). Pick a version in that range, or None for {newest}.",
            stage="lowering",
        )
    return requested


@functools.lru_cache(maxsize=8)
def _registry(opset: int, translations: tuple[tuple[Any, Any], ...]) -> Any:
    """torchlib's registry for ``opset`` with hfexport's translations, built once per process and table:
    building it walks every torchlib function (about a second each export, several per export_for_generation).
    The exporter only reads it."""
    from torch.onnx._internal.exporter import _registration

    registry = _registration.ONNXRegistry.from_torchlib(opset_version=opset)
    for op, fn in translations:
        registry.register_op(op, fn, is_complex=False)
    return registry


def _translations_key(opset: int) -> tuple[int, tuple[tuple[Any, Any], ...]]:
    """(opset, at least ``MIN_OPSET``; hfexport's translations as registered now): what the registry and the
    decomposition table are cached by. Read at call time: ``benchmarks/profile_ort_step.py`` swaps translations."""
    opset = max(opset, MIN_OPSET)
    return opset, tuple(onnx_fixes.translation_table(opset).items())


def registry_for(opset: int) -> Any:
    """torchlib's registry with hfexport's translations as registered now, for ``opset`` (at least ``MIN_OPSET``)."""
    return _registry(*_translations_key(opset))


@functools.lru_cache(maxsize=8)
def _decomposition_table(opset: int, translations: tuple[tuple[Any, Any], ...]) -> Any:
    """torch.onnx's decomposition table for what the registry translates, split for a one-pass trace
    (``decomposed_trace.split_table``); built once per registry, read only."""
    from torch.onnx._internal.exporter import _decomp

    implemented = set(_decomp.get_onnx_implemented_overloads(_registry(opset, translations)))
    return decomposed_trace.split_table(_decomp.create_onnx_friendly_decomposition_table(implemented))


def decomposition_table(config: Any) -> Any:
    """The split ONNX decomposition table for ``config``'s opset (``decomposed_trace.split_table``): the ONNX
    trace stage traces straight into it, as torch.export's training-IR trace followed by torch.onnx's decomposition
    retrace would give in two traces."""
    return _decomposition_table(*_translations_key(resolve_opset(config.opset_version)))


def decompose_training_ir(program: torch.export.ExportedProgram, config: Any) -> torch.export.ExportedProgram:
    """A training-IR program made the one trace's: its two-pass fixes, then torch.onnx's decompositions (where
    torch refuses the one trace)."""
    from torch.onnx._internal.exporter import _fx_passes

    apply_fx_program_fixes(onnx_fixes.TWO_PASS, program)
    registry = registry_for(resolve_opset(config.opset_version))
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
        return _fx_passes.decompose_with_registry(program, registry)


@register_exporter("onnx")
class OnnxExporter(HfExporter):
    """transformers model -> ``torch.onnx.ONNXProgram`` with flat, named inputs and outputs."""

    export_format = ExportFormat.ONNX
    config_class = OnnxConfig
    required_packages = ["torch", "transformers", "onnx", "onnxscript", "onnxruntime"]
    min_versions = {"torch": "2.11.0"}
    tracer = Trace(
        patch_backends=("dynamo", "onnx"),
        export_format="onnx",
        decompositions=decomposition_table,
        after_training_ir=decompose_training_ir,
    )
    file_suffix = ".onnx"

    def export(self, model: Any, sample_inputs: Mapping[str, Any], config: ExportConfigMixin | None = None) -> Any:
        """Trace, lower to ONNX, name everything, write ``output_path`` if set."""
        config = cast(OnnxConfig, self.resolve_config(config))  # resolve_config checked the format
        opset = resolve_opset(config.opset_version)
        graph_inputs, _ = split_inputs(sample_inputs)
        input_names = list(flatten_named(graph_inputs).keys())
        program = self.trace(model, sample_inputs, config)
        start = time.perf_counter()
        onnx_program = self.lower(program, config, opset, input_names)
        logger.info("ONNX lowering of %s took %.2fs", type(model).__name__, time.perf_counter() - start)
        if config.output_path is not None:
            self.save(onnx_program, config.output_path)
        return onnx_program

    # -- lowering -------------------------------------------------------------------------------------
    def lower(
        self, program: torch.export.ExportedProgram, config: OnnxConfig, opset: int, input_names: list[str]
    ) -> Any:
        """ExportedProgram -> ONNXProgram (stages 1-6 of the module doc)."""
        from torch.onnx._internal.exporter import _core

        user_inputs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        if len(user_inputs) != len(input_names):
            logger.warning(
                "the program has %d user inputs but the sample flattens to %d names; keeping torch's input names",
                len(user_inputs),
                len(input_names),
            )
            names_by_placeholder = {}
        else:
            names_by_placeholder = {s.arg.name: n for s, n in zip(user_inputs, input_names) if hasattr(s.arg, "name")}
        output_names = self._user_output_names(program)

        registry = registry_for(opset)
        try:
            decomposed = self._prepare(program)
        except Exception as exc:
            raise HfExportError(
                f"preparing the decomposed program for ONNX failed: {type(exc).__name__}: {exc}\n"
                "Try: register an FX node fix (hfexport.register_fx_node_fix('onnx')) or a torch patch "
                "(register_patch('onnx', ...)) for the op named above; export with DynamoExporter to check the "
                "trace itself works.",
                stage="lowering",
            ) from exc
        try:
            onnx_program = _core._exported_program_to_onnx_program(decomposed, registry=registry)
        except Exception as exc:
            raise HfExportError(
                f"translating the graph to ONNX failed: {type(exc).__name__}: {exc}\n"
                "Try: a custom translation for the op named above "
                "(hfexport.patching.onnx_fixes.register_onnx_translation), another opset_version, "
                "or a torch patch that avoids the op while exporting.",
                stage="lowering",
            ) from exc
        model = onnx_program.model
        mutated = self._expose_input_mutations(model, decomposed)
        try:
            if opset != MIN_OPSET:
                from torch.onnx._internal._lazy_import import onnxscript_apis

                onnx_program.model = model = onnxscript_apis.convert_version(model, opset)
            if config.optimize:
                onnx_program.optimize()
                model = onnx_program.model
            onnx_fixes.apply_onnx_ir_fixes(model)
            quantize_onnx_graph(model, config)
        except HfExportError:
            raise
        except Exception as exc:
            raise HfExportError(
                f"ONNX post-processing failed (opset {opset}, optimize={config.optimize}): "
                f"{type(exc).__name__}: {exc}\nTry: optimize=False, or opset_version={MIN_OPSET}.",
                stage="lowering",
            ) from exc
        got_opset = model.opset_imports.get("", None)
        if got_opset != opset:
            raise HfExportError(
                f"the ONNX model has opset {got_opset}, not the requested {opset} (the version converter gave up). "
                f"Try opset_version={MIN_OPSET} or None.",
                stage="lowering",
            )
        onnx_names.name_values(model, names_by_placeholder, output_names, mutated)
        self._apply_initializer_options(model, config)
        setattr(onnx_program, _EXTERNAL_DATA_ATTR, config.external_data)
        return onnx_program

    @staticmethod
    def _prepare(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
        """torch.onnx's preparation of a program it has decomposed (the trace stage did): explicit type
        promotion, no assertion nodes; then hfexport's FX node fixes. Size-oblivious, as torch.onnx's own."""
        from torch.onnx._internal.exporter import _fx_passes

        with torch.fx.experimental._config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
            graph_module = program.graph_module
            _fx_passes.insert_type_promotion_nodes(graph_module)
            graph_module = _fx_passes.remove_assertion_nodes(graph_module)
            apply_fx_node_fixes("onnx", graph_module)
            program._graph_module = graph_module
        return program

    @staticmethod
    def _expose_input_mutations(model: Any, program: torch.export.ExportedProgram) -> list[tuple[str, str]]:
        """Add in-place input writes (a StaticCache update) as graph outputs; torch.onnx leaves them out.

        Returns (output value name, mutated placeholder name) pairs, in graph-output order.
        """
        specs = [s for s in program.graph_signature.output_specs if s.kind.name == "USER_INPUT_MUTATION"]
        if not specs:
            return []
        values = {v.name: v for v in onnx_names.all_values(model)}
        added = []
        for spec in specs:
            value = values.get(spec.arg.name)
            if value is None:
                logger.warning("input mutation %s has no ONNX value; the in-place update is lost", spec.arg.name)
                continue
            model.graph.outputs.append(value)
            added.append((value.name, spec.target))
        return added

    @staticmethod
    def _user_output_names(program: torch.export.ExportedProgram) -> list[str]:
        """Names of the outputs the ONNX graph will have: torch.onnx drops outputs that are None constants
        (e.g. the hidden states a vision tower was told not to keep), so their names go too."""
        names = spec_leaf_names(program.call_spec.out_spec)
        specs = [s for s in program.graph_signature.output_specs if s.kind.name == "USER_OUTPUT"]
        if len(specs) != len(names):
            return names
        return [
            n
            for n, s in zip(names, specs)
            if not (type(s.arg).__name__ == "ConstantArgument" and getattr(s.arg, "value", 0) is None)
        ]

    @staticmethod
    def _apply_initializer_options(model: Any, config: OnnxConfig) -> None:
        """export_params=False drops the weights; keep_initializers_as_inputs lists them as inputs too.

        torch.onnx applies both only while writing a file; here the returned model itself reflects them, so
        an in-memory program and a saved one agree.
        """
        graph = model.graph
        initializers = list(graph.initializers.values())
        if not config.export_params:
            graph.initializers.clear()
            for value in initializers:
                value.const_value = None
        if config.keep_initializers_as_inputs:
            present = set(id(v) for v in graph.inputs)
            graph.inputs.extend(v for v in initializers if id(v) not in present)

    # -- artifacts --------------------------------------------------------------------------------------
    @classmethod
    def save(cls, program: Any, path: str, external_data: bool | None = None) -> list[str]:
        """Write ``path`` (+ ``path``'s name + ``_data`` for external weights) atomically; returns the files.

        ``external_data=None`` follows the config the program was exported with (default True).
        """
        import onnx_ir as ir

        if external_data is None:
            external_data = getattr(program, _EXTERNAL_DATA_ATTR, True)
        model = getattr(program, "model", program)
        target = Path(path)
        side = target.name + "_data"
        has_weights = any(v.const_value is not None for v in model.graph.initializers.values())
        written = [str(target)]
        try:
            with atomic_output(target) as tmp:
                if external_data and has_weights:
                    ir.save(model, tmp / target.name, external_data=side)
                    if (tmp / side).exists():
                        written.insert(0, str(target.parent / side))
                else:
                    ir.save(model, tmp / target.name)
        except HfExportError:
            raise
        except Exception as exc:
            raise HfExportError(
                f"saving the ONNX model to {target} failed: {type(exc).__name__}: {exc}", stage="save"
            ) from exc
        if not external_data and (target.parent / side).exists():
            logger.info(
                "%s is left from an earlier save with external data; this model does not use it", target.parent / side
            )
        return written

    @classmethod
    def load(cls, path: str) -> Any:
        """The saved model as an ``onnx.ModelProto`` (weights loaded from the side file)."""
        import onnx

        return onnx.load(str(path))

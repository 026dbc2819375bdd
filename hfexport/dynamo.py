"""DynamoExporter: a transformers model to a torch.export ExportedProgram, in five stages.

1. flat forward signature from the sample inputs (tensors and caches become graph
   inputs; flags such as ``use_cache=False`` are bound as constants);
2. reversible patches of every backend this exporter serves (``patching``);
3. pytree registration of every ``Cache`` subclass (``caches``);
4. dynamic shapes: explicit ones unchanged, or Dim.AUTO everywhere for
   ``dynamic=True``, traced size-obliviously so size-1 sample axes stay symbolic;
5. non-cache model state cleared during the trace and restored after.

Around all five, ``model_state.preserved`` puts the caller's model back exactly
as it was, and the caller's inputs are never touched (caches are traced on copies).
The ONNX and ExecuTorch exporters reuse ``trace`` and add their own stages after it.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

import torch

from . import batch_retrace, caches, decomposed_trace, shapes, trace_cache
from .base import HfExporter
from .configs import DynamoConfig, ExportConfigMixin, ExportFormat
from .errors import HfExportError
from .graph_writes import written_inputs
from .io import atomic_output
from .model_state import preserved, restore_model, snapshot_model, stateful_attributes_cleared
from .patching import apply_fx_program_fixes, apply_patches
from .patching.attention import check_attention_exportable
from .quantization import quantized_for_trace
from .registry import register_exporter

logger = logging.getLogger(__name__)

# torch warns when forward assigns a tensor attribute during export. These are caches a model keeps between
# generate() steps (qwen2-vl's rope deltas); the export restores the model's state after the trace
# (model_state.preserved), so the warning tells the user nothing they must act on.
RESTORED_ATTRIBUTE_WARNINGS = (r"The tensor attribute self\.\S*rope_deltas was assigned during export",)


@contextlib.contextmanager
def stack_traces(keep: bool) -> Any:
    """Whether torch.fx captures a Python stack per graph node while tracing (``DynamoConfig.stack_traces``)."""
    import torch.fx.config as fx_config

    before = fx_config.do_not_emit_stack_traces
    fx_config.do_not_emit_stack_traces = not keep
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = before


@contextlib.contextmanager
def _quiet_restored_attributes() -> Any:
    import warnings

    with warnings.catch_warnings():
        for message in RESTORED_ATTRIBUTE_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


def carries_tensors(value: Any) -> bool:
    """True for tensors, caches and containers that hold them: those become graph inputs."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, Mapping):
        return any(carries_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(carries_tensors(v) for v in value)
    if caches.is_cache(value):
        return True
    return bool(getattr(value, "__dict__", None)) and any(carries_tensors(v) for v in vars(value).values())


def tensor_inputs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments that are graph inputs (tensors, caches, containers of them); flags and other
    constants were baked into the graph at export, so a call of the exported program drops them."""
    return {k: v for k, v in kwargs.items() if carries_tensors(v)}


def split_inputs(sample_inputs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(graph inputs, constants). Caches are cloned so tracing never mutates the caller's."""
    if not isinstance(sample_inputs, Mapping):
        raise TypeError(
            f"sample_inputs must be a dict of named inputs (e.g. a tokenizer's BatchEncoding), "
            f"got {type(sample_inputs).__name__}"
        )
    graph, constants = {}, {}
    for name, value in dict(sample_inputs).items():
        if carries_tensors(value):
            graph[name] = caches.clone_cache(value) if caches.is_cache(value) else value
        else:
            constants[name] = value
    if not graph:
        raise ValueError("sample_inputs holds no tensor: pass at least the model's main input (e.g. input_ids)")
    return _in_guide_order(graph), constants


# The positional layout a caller of a backend without input names (an ExecuTorch method) is written against:
# the decode loop's token ids, mask, positions, then the cache; every other input keeps the caller's order after
# them. An encoder-decoder's ``decoder_input_ids`` is one of "the rest": ahead of the mask it would reorder a plain
# export's (input_ids, attention_mask, decoder_input_ids), and ahead of ``input_features`` or ``pixel_values`` a
# speech or vision encoder-decoder's, against the caller's order that a positional caller passes.
# The cache under either of its names (transformers 5.25 renamed it: patching.renames.CACHE_ARGUMENT).
GUIDE_INPUT_ORDER = ("input_ids", "attention_mask", "position_ids", "past_key_values", "cache")


def _in_guide_order(graph: dict[str, Any]) -> dict[str, Any]:
    """``graph`` with the guide's inputs first, in the guide's order (a generate() call passes them in another),
    the others in the caller's order."""
    first = [name for name in GUIDE_INPUT_ORDER if name in graph]
    return {**{name: graph[name] for name in first}, **graph}


@contextlib.contextmanager
def flat_forward(model: torch.nn.Module, graph_inputs: Mapping[str, Any], constants: Mapping[str, Any]):
    """Stage 1: give ``model.forward`` an explicit signature of exactly the graph inputs."""
    original = model.forward

    def forward(**kwargs: Any) -> Any:
        return original(**kwargs, **constants)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in graph_inputs]
    )
    model.forward = forward  # instance attribute; preserved() removes it again
    yield


@register_exporter("dynamo")
class DynamoExporter(HfExporter):
    """transformers model -> ``torch.export.ExportedProgram``."""

    export_format = ExportFormat.DYNAMO
    config_class = DynamoConfig
    required_packages = ["torch", "transformers"]
    min_versions = {"torch": "2.11.0"}
    # Patch sets installed during tracing, in order.
    patch_backends: ClassVar[tuple[str, ...]] = ("dynamo",)
    file_suffix = ".pt2"

    def export(self, model: Any, sample_inputs: Mapping[str, Any], config: ExportConfigMixin | None = None) -> Any:
        config = cast(DynamoConfig, self.resolve_config(config))  # resolve_config checked the format
        program = self.trace(model, sample_inputs, config)
        written = written_inputs(program)
        if not written:  # nothing to functionalise: the retrace would cost as long as the export did
            return program
        # Functionalise (no decompositions): in-place writes to inputs, e.g. a StaticCache, become
        # USER_INPUT_MUTATION outputs that program.module() applies back to the caller's tensors.
        logger.debug("functionalising %s: it writes into %s", type(model).__name__, ", ".join(written))
        with self.tracing_mode(config):
            functional = program.run_decompositions({})
        back = batch_retrace.drop_again(functional, program)  # the retrace derives the batch-2 trace's guards again
        if back:
            logger.debug("functionalisation brought back guards the batch retrace had dropped; dropped again: %s", back)
        return functional

    @contextlib.contextmanager
    def tracing_mode(self, config: DynamoConfig) -> Any:
        """The mode that later passes over the program must keep (size-oblivious when dynamic, stack traces
        captured only when asked for)."""
        with shapes.symbolic_size_one(config.dynamic or config.dynamic_shapes is not None):
            with stack_traces(config.stack_traces):
                yield

    def dynamic_shapes_for(self, graph_inputs: dict[str, Any], config: DynamoConfig) -> Any:
        """Stage 4: explicit shapes unchanged, Dim.AUTO everywhere for dynamic=True, else static."""
        if config.dynamic_shapes is not None:
            return config.dynamic_shapes
        if config.dynamic:
            return shapes.auto_dynamic_shapes(graph_inputs)
        return None

    def trace(self, model: Any, sample_inputs: Mapping[str, Any], config: DynamoConfig) -> torch.export.ExportedProgram:
        """Run the five stages and return the ExportedProgram; the model comes back untouched."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{type(self).__name__}.export needs a torch.nn.Module, got {type(model).__name__}")
        check_attention_exportable(model)
        graph_inputs, constants = split_inputs(sample_inputs)
        caches.register_cache_pytrees()  # stage 3 (idempotent, also needed by torch.export.load)
        dynamic_shapes = self.dynamic_shapes_for(graph_inputs, config)
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            stack.enter_context(preserved(model))
            if model.training:
                logger.info("%s is in training mode; exporting its eval behaviour (dropout off)", type(model).__name__)
            model.eval()
            # Patches go in before stage 1 binds model.forward, so a patch of the exported module's own
            # forward (a vision encoder exported as a generation component) applies too.
            stack.enter_context(apply_patches(*self.patch_backends))  # stage 2
            stack.enter_context(quantized_for_trace(model, config))  # undone before the model is restored
            stack.enter_context(flat_forward(model, graph_inputs, constants))  # stage 1
            stack.enter_context(stateful_attributes_cleared(model))  # stage 5
            stack.enter_context(self.tracing_mode(config))
            carries_cache = any(caches.is_cache(v) for v in sample_inputs.values())
            cache_on = trace_cache.cache_pays_off(
                model, str(getattr(self.export_format, "value", self.export_format)), carries_cache
            )
            stack.enter_context(trace_cache.fake_tensor_cache(cache_on))
            stack.enter_context(torch.no_grad())
            stack.enter_context(_quiet_restored_attributes())
            program = self._export(model, graph_inputs, dynamic_shapes, config)
            if config.dynamic and config.dynamic_shapes is None:
                program = self.open_pinned_batch(model, program, graph_inputs, config)
            for backend in self.patch_backends:
                apply_fx_program_fixes(backend, program)
        logger.info("torch.export of %s took %.2fs", type(model).__name__, time.perf_counter() - start)
        return program

    def trace_call(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: DynamoConfig) -> Any:
        """The one torch.export call of a trace: a training-IR program here; the ONNX exporter traces straight
        into its decomposed IR instead."""
        return torch.export.export(
            model,
            args=(),
            kwargs=graph_inputs,
            dynamic_shapes=dynamic_shapes,
            strict=config.strict,
            prefer_deferred_runtime_asserts_over_guards=config.prefer_deferred_runtime_asserts_over_guards,
        )

    def trace_decomposed(
        self,
        model: Any,
        graph_inputs: dict[str, Any],
        dynamic_shapes: Any,
        config: DynamoConfig,
        table: Any,
        in_two_passes: Callable[[], Any],
    ) -> Any:
        """One trace straight into the ATen program ``table`` decomposes (``decomposed_trace``), for an exporter
        whose backend would otherwise retrace torch.export's training-IR program to decompose it.

        Where torch refuses the one trace (its constraint solver rejected DeepSeek-V4's decode step, which the
        training-IR trace accepts), the model is put back as it was and ``in_two_passes()`` traces it instead; an
        error from that way is the export's error. A tied batch the trace pinned is not retried that way: the model
        code that pinned it runs the same in both (Funnel's failed two-pass trace cost 2.6 s)."""
        snapshot = snapshot_model(model)
        try:
            return decomposed_trace.export_decomposed(
                model,
                graph_inputs,
                dynamic_shapes,
                table,
                strict=config.strict,
                prefer_deferred_runtime_asserts_over_guards=config.prefer_deferred_runtime_asserts_over_guards,
            )
        except Exception as exc:
            if shapes.pins_tied_batch(exc, dynamic_shapes):
                restore_model(model, snapshot)
                raise
            logger.info(
                "the one-pass trace of %s failed (%s: %s); tracing in two passes",
                type(model).__name__,
                type(exc).__name__,
                str(exc)[:300],
            )
            restore_model(model, snapshot)
        return in_two_passes()

    def _export(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: DynamoConfig) -> Any:
        try:
            return self.trace_call(model, graph_inputs, dynamic_shapes, config)
        except Exception as exc:
            raise HfExportError(
                f"torch.export failed for {type(model).__name__}: {type(exc).__name__}: {_brief(exc)}\n"
                "Try: explicit dynamic_shapes with Dim(min=, max=) on only the axes that vary, "
                "prefer_deferred_runtime_asserts_over_guards=True, or dynamic=False to see whether the failure "
                "is shape-related.",
                stage="export",
            ) from exc

    def open_pinned_batch(self, model: Any, program: Any, graph_inputs: dict[str, Any], config: DynamoConfig) -> Any:
        """``program`` unless its batch-1 trace pinned the batch of plain tensor inputs; then the program traced
        from batch 2 and opened to batch 1, once it matches the eager model at the sample (``batch_retrace``)."""
        names = batch_retrace.pinned_batch_inputs(program)
        if not names or not self.batch_two_can_open(graph_inputs, names):
            return program
        opened = self.trace_from_batch_two(model, graph_inputs, names, shapes.auto_dynamic_shapes, config)
        return program if opened is None else opened

    @staticmethod
    def batch_two_can_open(graph_inputs: dict[str, Any], names: list[str]) -> bool:
        """Every graph input is a plain tensor (a cache would be advanced by the eager comparison) and every input
        in ``names`` has batch 1."""
        plain = all(isinstance(v, torch.Tensor) for v in graph_inputs.values())
        return plain and batch_retrace.batch_one_sample(graph_inputs, names)

    def trace_from_batch_two(
        self, model: Any, graph_inputs: dict[str, Any], names: list[str], shapes_of: Any, config: DynamoConfig
    ) -> Any:
        """The program traced from ``graph_inputs`` widened to batch 2 (``shapes_of(wide)`` its dynamic shapes)
        and opened to batch 1 on ``names``, or None, with a warning, where a step fails or it differs from eager."""
        wide = shapes.widen_batch(graph_inputs)
        try:
            retraced = self._export(model, wide, shapes_of(wide), config)
        except HfExportError as exc:
            logger.warning("the batch of %s stays pinned to 1: the batch-2 retrace failed (%s)", ", ".join(names), exc)
            return None
        dropped = batch_retrace.accept_batch_one(retraced, names, graph_inputs)
        mismatch = batch_retrace.differs_from_eager(model, retraced, graph_inputs)
        if mismatch or batch_retrace.pinned_batch_inputs(retraced):
            logger.warning(
                "the batch of %s stays pinned to 1: the batch-2 program %s", ", ".join(names), mismatch or "pins it too"
            )
            return None
        logger.info(
            "batch of %s was pinned at 1 by the trace; traced from batch 2, dropped %s", ", ".join(names), dropped
        )
        batch_retrace.remember_dropped(retraced, dropped)
        return retraced

    # -- artifacts ------------------------------------------------------------------------
    @classmethod
    def save(cls, program: Any, path: str) -> list[str]:
        # torch.export.load reads example inputs with weights_only=True, which cannot rebuild a ModelOutput
        # (an OrderedDict subclass: SETITEM is refused), e.g. a seq2seq decode step's encoder_outputs. They are
        # saved as plain dicts (same leaves, same order); runners rebuild the structure from the call spec.
        original = program.example_inputs
        program._example_inputs = _plain_model_outputs(original)
        try:
            with atomic_output(path) as tmp:
                torch.export.save(program, str(tmp / _name(path)))
        finally:
            program._example_inputs = original
        return [str(path)]

    @classmethod
    def load(cls, path: str) -> torch.export.ExportedProgram:
        from .runtime.program_store import load_program  # read once per process while the file is unchanged

        return load_program(path)


def _plain_model_outputs(value: Any) -> Any:
    """The same containers with every dict, ModelOutputs (OrderedDict subclasses) included, a plain dict."""
    if isinstance(value, dict):
        return {k: _plain_model_outputs(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_model_outputs(v) for v in value)
    return value


def _brief(exc: BaseException, limit: int = 1500) -> str:
    """The head of an exception message: torch errors can embed whole graphs."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def _name(path: Any) -> str:
    from pathlib import Path

    return Path(path).name

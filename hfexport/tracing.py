"""The trace stage: a transformers model to a ``torch.export.ExportedProgram``, the first stage of every exporter.

An exporter is composed of stages (trace, then its own lowering and saving); each one holds a ``Trace`` that says
what differs between backends, as data: the patch sets installed while tracing, the decomposition table of a one
trace straight into the backend's ATen IR (and what a training-IR program needs to equal it where torch refuses
that one trace), and whether a tied batch the trace pinned is traced again from batch 2. The dynamic shapes come
from the export's one ``ShapePlan``.

Inside ``Trace.run``, five steps:

1. flat forward signature from the sample inputs (tensors and caches become graph inputs; flags such as
   ``use_cache=False`` are bound as constants; ``graph_inputs``);
2. reversible patches of the backend's patch sets (``patching``);
3. pytree registration of every ``Cache`` subclass (``caches``);
4. dynamic shapes from the plan, traced size-obliviously so size-1 sample axes stay symbolic;
5. non-cache model state cleared during the trace and restored after.

Around all five, ``model_state.preserved`` puts the caller's model back exactly as it was, and the caller's inputs
are never touched (caches are traced on copies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from . import batch_retrace, caches, decomposed_trace, shapes, trace_cache
from .errors import HfExportError
from .graph_inputs import flat_forward, split_inputs
from .model_state import preserved, restore_model, snapshot_model, stateful_attributes_cleared
from .patching import apply_fx_program_fixes, apply_patches
from .patching.attention import check_attention_exportable
from .quantization import quantized_for_trace
from .shape_plan import ShapePlan

logger = logging.getLogger("hfexport.dynamo")

# torch warns when forward assigns a tensor attribute during export. These are caches a model keeps between
# generate() steps (qwen2-vl's rope deltas); the export restores the model's state after the trace
# (model_state.preserved), so the warning tells the user nothing they must act on.
RESTORED_ATTRIBUTE_WARNINGS = (r"The tensor attribute self\.\S*rope_deltas was assigned during export",)

# A config -> the split decomposition table of a one trace (``decomposed_trace.split_table``), or None to trace
# torch.export's training IR.
DecompositionsOf = Callable[[Any], Any]
# (training-IR program, config) -> the program the one trace would have given.
AfterTrainingIr = Callable[[torch.export.ExportedProgram, Any], torch.export.ExportedProgram]


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
    with warnings.catch_warnings():
        for message in RESTORED_ATTRIBUTE_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


@dataclasses.dataclass(frozen=True)
class Trace:
    """What a backend's trace stage does differently, as data (see the module doc).

    ``patch_backends``: patch sets installed while tracing, in order. ``export_format``: the backend's name (the
    fake-tensor cache decision reads it). ``decompositions``: the table of a one trace straight into the backend's
    decomposed IR, or None for torch.export's training IR. ``after_training_ir``: what a training-IR program needs
    to be the one trace's program, where torch refuses the one trace. ``retrace_tied_batch``: where the trace pins
    the plan's tied batch, trace again from batch 2, then with every axis free (ExecuTorch)."""

    patch_backends: tuple[str, ...]
    export_format: str
    decompositions: DecompositionsOf | None = None
    after_training_ir: AfterTrainingIr | None = None
    retrace_tied_batch: bool = False

    def run(
        self, model: Any, sample_inputs: Mapping[str, Any], config: Any, plan: ShapePlan
    ) -> torch.export.ExportedProgram:
        """The five steps of the module doc; returns the ExportedProgram and leaves the model untouched."""
        check_attention_exportable(model)
        graph_inputs, constants = split_inputs(sample_inputs)
        caches.register_cache_pytrees()  # step 3 (idempotent, also needed by torch.export.load)
        dynamic_shapes = plan.dynamic_shapes(graph_inputs)
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            stack.enter_context(preserved(model))
            if model.training:
                logger.info("%s is in training mode; exporting its eval behaviour (dropout off)", type(model).__name__)
            model.eval()
            # Patches go in before step 1 binds model.forward, so a patch of the exported module's own
            # forward (a vision encoder exported as a generation component) applies too.
            stack.enter_context(apply_patches(*self.patch_backends))  # step 2
            stack.enter_context(quantized_for_trace(model, config))  # undone before the model is restored
            stack.enter_context(flat_forward(model, graph_inputs, constants))  # step 1
            stack.enter_context(stateful_attributes_cleared(model))  # step 5
            stack.enter_context(self.mode(plan, config))
            carries_cache = any(caches.is_cache(v) for v in sample_inputs.values())
            cache_on = trace_cache.cache_pays_off(model, self.export_format, carries_cache)
            stack.enter_context(trace_cache.fake_tensor_cache(cache_on))
            stack.enter_context(torch.no_grad())
            stack.enter_context(_quiet_restored_attributes())
            program = self.export_once(model, graph_inputs, dynamic_shapes, config, plan)
            if plan.opens_pinned_batch:
                program = self.open_pinned_batch(model, program, graph_inputs, config, plan)
            for backend in self.patch_backends:
                apply_fx_program_fixes(backend, program)
        logger.info("torch.export of %s took %.2fs", type(model).__name__, time.perf_counter() - start)
        return program

    @contextlib.contextmanager
    def mode(self, plan: ShapePlan, config: Any) -> Any:
        """The mode of the trace that every later pass over the program must keep (size-oblivious where the plan
        has symbolic axes, stack traces captured only when the config asks)."""
        with shapes.symbolic_size_one(plan.symbolic):
            with stack_traces(getattr(config, "stack_traces", False)):
                yield

    # -- the one torch.export call ----------------------------------------------------------------------
    def call(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any) -> Any:
        """The torch.export call of a trace: one trace straight into the backend's decomposed IR where it has a
        table, else the training IR and what it needs after (``two_passes``)."""
        table = self.decompositions(config) if self.decompositions is not None else None
        if table is None:
            return self.two_passes(model, graph_inputs, dynamic_shapes, config)
        return self.one_pass(model, graph_inputs, dynamic_shapes, config, table)

    @staticmethod
    def training_ir(model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any) -> Any:
        """torch.export's training-IR program."""
        return torch.export.export(
            model,
            args=(),
            kwargs=graph_inputs,
            dynamic_shapes=dynamic_shapes,
            strict=config.strict,
            prefer_deferred_runtime_asserts_over_guards=config.prefer_deferred_runtime_asserts_over_guards,
        )

    def two_passes(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any) -> Any:
        """The training-IR program made what the one trace gives (``after_training_ir``)."""
        program = self.training_ir(model, graph_inputs, dynamic_shapes, config)
        return program if self.after_training_ir is None else self.after_training_ir(program, config)

    def one_pass(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any, table: Any) -> Any:
        """One trace straight into the ATen program ``table`` decomposes (``decomposed_trace``), for a backend whose
        lowering would otherwise retrace torch.export's training-IR program to decompose it.

        Where torch refuses the one trace (its constraint solver rejected DeepSeek-V4's decode step, which the
        training-IR trace accepts), the model is put back as it was and traced in two passes; an error from that
        way is the export's error. A tied batch the trace pinned is not retried that way: the model code that
        pinned it runs the same in both (Funnel's failed two-pass trace cost 2.6 s)."""
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
        return self.two_passes(model, graph_inputs, dynamic_shapes, config)

    def export_checked(self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any) -> Any:
        """``call``, its failure an HfExportError that says what to try."""
        try:
            return self.call(model, graph_inputs, dynamic_shapes, config)
        except Exception as exc:
            raise HfExportError(
                f"torch.export failed for {type(model).__name__}: {type(exc).__name__}: {brief(exc)}\n"
                "Try: explicit dynamic_shapes with Dim(min=, max=) on only the axes that vary, "
                "prefer_deferred_runtime_asserts_over_guards=True, or dynamic=False to see whether the failure "
                "is shape-related.",
                stage="export",
            ) from exc

    # -- a batch the trace pinned ---------------------------------------------------------------------------
    def export_once(
        self, model: Any, graph_inputs: dict[str, Any], dynamic_shapes: Any, config: Any, plan: ShapePlan
    ) -> Any:
        """``export_checked``; with ``retrace_tied_batch``, where the trace pins the tied batch symbol (Funnel's
        batch-1 trace: 'Constraints violated (batch)'), the model is put back and traced from batch 2 with the batch
        still tied, then opened to batch 1 (``trace_from_batch_two``); where that fails, traced with every axis
        free, so that ``open_pinned_batch`` can still open the batch the trace pinned."""
        if not self.retrace_tied_batch:
            return self.export_checked(model, graph_inputs, dynamic_shapes, config)
        snapshot = snapshot_model(model)
        try:
            return self.export_checked(model, graph_inputs, dynamic_shapes, config)
        except HfExportError as exc:
            if not shapes.pins_tied_batch(exc, dynamic_shapes):
                raise
            restore_model(model, snapshot)
        tied = shapes.tied_batch_inputs(dynamic_shapes)
        if batch_two_can_open(graph_inputs, tied):
            logger.info("the trace of %s pinned the tied batch axis; tracing from batch 2", type(model).__name__)

            def tied_from_two(wide: dict[str, Any]) -> Any:  # accept_batch_one lowers the bound to 1
                return plan.dynamic_shapes(wide, tied=True, batch_from=2)

            opened = self.trace_from_batch_two(model, graph_inputs, tied, tied_from_two, config, plan)
            if opened is not None:
                return opened
            restore_model(model, snapshot)
        logger.info("the trace of %s pinned the tied batch axis; tracing with every axis free", type(model).__name__)
        return self.export_checked(model, graph_inputs, plan.free(graph_inputs), config)

    def open_pinned_batch(
        self, model: Any, program: Any, graph_inputs: dict[str, Any], config: Any, plan: ShapePlan
    ) -> Any:
        """``program`` unless its batch-1 trace pinned the batch of plain tensor inputs; then the program traced
        from batch 2 and opened to batch 1, once it matches the eager model at the sample (``batch_retrace``)."""
        names = batch_retrace.pinned_batch_inputs(program)
        if not names or not batch_two_can_open(graph_inputs, names):
            return program
        opened = self.trace_from_batch_two(model, graph_inputs, names, plan.free, config, plan)
        return program if opened is None else opened

    def trace_from_batch_two(
        self,
        model: Any,
        graph_inputs: dict[str, Any],
        names: list[str],
        shapes_of: Callable[[dict[str, Any]], Any],
        config: Any,
        plan: ShapePlan,
    ) -> Any:
        """The program traced from ``graph_inputs`` widened to batch 2 (``shapes_of(wide)`` its dynamic shapes)
        and opened to batch 1 on ``names``, or None, with a warning, where a step fails or it differs from eager."""
        wide = shapes.widen_batch(graph_inputs)
        try:
            retraced = self.export_once(model, wide, shapes_of(wide), config, plan)
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


def batch_two_can_open(graph_inputs: dict[str, Any], names: list[str]) -> bool:
    """Every graph input is a plain tensor (a cache would be advanced by the eager comparison) and every input in
    ``names`` has batch 1."""
    plain = all(isinstance(v, torch.Tensor) for v in graph_inputs.values())
    return plain and batch_retrace.batch_one_sample(graph_inputs, names)


def brief(exc: BaseException, limit: int = 1500) -> str:
    """The head of an exception message: torch errors can embed whole graphs."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"

"""DynamoExporter: a transformers model to a torch.export ExportedProgram.

Its stages: the trace (``tracing.Trace`` with the ``"dynamo"`` patch set, torch.export's training IR), then, where
the program writes into its inputs (a StaticCache), functionalisation, so that ``program.module()`` applies the
writes back to the caller's tensors; ``save`` writes the ``.pt2`` atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import torch

from . import batch_retrace
from .base import HfExporter
from .configs import DynamoConfig, ExportConfigMixin, ExportFormat
from .graph_inputs import GUIDE_INPUT_ORDER, carries_tensors, split_inputs, tensor_inputs
from .graph_writes import written_inputs
from .io import atomic_output
from .registry import register_exporter
from .tracing import Trace

logger = logging.getLogger(__name__)

__all__ = ["DynamoExporter", "GUIDE_INPUT_ORDER", "carries_tensors", "split_inputs", "tensor_inputs"]


@register_exporter("dynamo")
class DynamoExporter(HfExporter):
    """transformers model -> ``torch.export.ExportedProgram``."""

    export_format = ExportFormat.DYNAMO
    config_class = DynamoConfig
    required_packages = ["torch", "transformers"]
    min_versions = {"torch": "2.11.0"}
    tracer = Trace(patch_backends=("dynamo",), export_format="dynamo")
    file_suffix = ".pt2"

    def export(self, model: Any, sample_inputs: Mapping[str, Any], config: ExportConfigMixin | None = None) -> Any:
        config = cast(DynamoConfig, self.resolve_config(config))  # resolve_config checked the format
        plan = self.shape_plan(config)
        program = self.trace(model, sample_inputs, config, plan)
        written = written_inputs(program)
        if not written:  # nothing to functionalise: the retrace would cost as long as the export did
            return program
        # Functionalise (no decompositions): in-place writes to inputs, e.g. a StaticCache, become
        # USER_INPUT_MUTATION outputs that program.module() applies back to the caller's tensors.
        logger.debug("functionalising %s: it writes into %s", type(model).__name__, ", ".join(written))
        with self.tracer.mode(plan, config):
            functional = program.run_decompositions({})
        back = batch_retrace.drop_again(functional, program)  # the retrace derives the batch-2 trace's guards again
        if back:
            logger.debug("functionalisation brought back guards the batch retrace had dropped; dropped again: %s", back)
        return functional

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


def _name(path: Any) -> str:
    from pathlib import Path

    return Path(path).name

"""The one dynamic-shape plan of an export: what ``dynamic=True`` and ``dynamic_shapes`` mean, decided once.

Every trace of one export reads this plan, never the config: the first trace, a retrace from batch 2 when the
batch-1 trace pinned the batch, the fallback with every axis free, the size-oblivious mode of the trace and of
every later pass over the program (functionalisation, ExecuTorch's lowering), and ``export_for_generation``'s
choice of widening a batch-1 sample. Before the plan existed each of those read ``config.dynamic`` on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import shapes


@dataclasses.dataclass(frozen=True)
class ShapePlan:
    """``explicit``: the config's ``dynamic_shapes`` (kept as given); ``dynamic``: ``dynamic=True`` (Dim.AUTO on
    every axis); ``tie_batch``: the exporter ties the token inputs' batch axes to one named Dim
    (``shapes.tie_batch_axes``; ExecuTorch's lowering needs one batch symbol, Dynamo's and ONNX's do not);
    ``static_batch``: the token inputs' batch axes stay the sample's (``shapes.static_batch_axes``): a cache the
    program owns fixes the batch, so a batch symbol would only admit inputs no run can take (and a batch-2 retrace
    that cannot succeed), and beside the sequence symbol it leaves every head view two symbolic sizes, which
    XNNPACK does not take: ``patching/delegate_heads.py``'s views stay in the delegate only with one."""

    explicit: Any = None
    dynamic: bool = False
    tie_batch: bool = False
    static_batch: bool = False

    @classmethod
    def of(cls, config: Any, tie_batch: bool = False) -> ShapePlan:
        """The plan of a config (an export config, or its dict form as ``export_for_generation`` takes)."""
        if isinstance(config, Mapping):
            return cls(config.get("dynamic_shapes"), bool(config.get("dynamic", False)), tie_batch)
        return cls(getattr(config, "dynamic_shapes", None), bool(getattr(config, "dynamic", False)), tie_batch)

    @property
    def symbolic(self) -> bool:
        """Whether any axis is symbolic: the trace, and every pass that retraces the program, then run
        size-obliviously so that a size-1 sample axis stays a symbol (``shapes.symbolic_size_one``)."""
        return self.dynamic or self.explicit is not None

    @property
    def automatic(self) -> bool:
        """Whether hfexport chose the axes (``dynamic=True`` without explicit shapes). Explicit shapes are the
        caller's and stay as given."""
        return self.dynamic and self.explicit is None

    @property
    def opens_pinned_batch(self) -> bool:
        """Whether a batch the batch-1 trace pinned is traced again from batch 2 to open it: only where hfexport
        chose the axes and the plan does not keep the batch static itself."""
        return self.automatic and not self.static_batch

    def dynamic_shapes(
        self, graph_inputs: dict[str, Any], tied: bool | None = None, batch_from: int | None = None
    ) -> Any:
        """The ``dynamic_shapes`` of a trace of ``graph_inputs``: explicit ones unchanged, Dim.AUTO on every axis for
        ``dynamic=True`` (the batch axes tied where the plan ties them, or as ``tied`` says; ``batch_from`` the tied
        batch's lower bound), else None (static)."""
        if self.explicit is not None:
            return self.explicit
        if not self.dynamic:
            return None
        spec = shapes.auto_dynamic_shapes(graph_inputs)
        if self.static_batch and isinstance(spec, dict):
            return shapes.static_batch_axes(spec, graph_inputs)
        if (self.tie_batch if tied is None else tied) and isinstance(spec, dict):
            return shapes.tie_batch_axes(spec, graph_inputs, batch_from)
        return spec

    def free(self, graph_inputs: dict[str, Any]) -> Any:
        """Every axis its own symbol, nothing tied: what a trace falls back to where a tied batch was pinned."""
        return self.dynamic_shapes(graph_inputs, tied=False)

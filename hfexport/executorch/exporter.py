"""ExecutorchExporter: a transformers model to an ExecuTorch program (``.pte``).

Its trace stage (``tracing.Trace`` with the ``"dynamo"`` and ``"executorch"`` patch sets) gives an
ExportedProgram, traced once straight into the functional ATen program EXIR's lowering decomposes to
(for the XNNPACK and portable backends), so that the lowering's decomposition retraces have nothing
left to do and are skipped (``executorch/speedups/retraces.py``); then:

1. every dynamic axis gets an upper bound: ExecuTorch plans memory for the largest
   shape a program accepts, and an unbounded axis would silently be planned at the
   sample size (a longer input then fails at run time with "resize a bounded tensor").
   Explicit ``Dim(min, max)`` are kept; unbounded axes get ``max_batch`` (axis 0) or
   ``max_length`` (any other axis), logged once per export, except the non-batch axes of a
   StaticCache, which get the sample's size (``max_cache_len``): the program's metadata then
   describes the cache a caller must allocate;
2. ``to_edge_transform_and_lower`` with the backend's partitioner (XNNPACK by default,
   none for ``"portable"``), under the ``executorch_lowering`` patch set;
3. ``to_executorch`` with memory planning driven by the config's three ``alloc_*`` flags
   and ``emit_mutable_buffer_names=True`` (so a runtime can reach program-owned state);
4. input and output names: a ``.pte`` has none, so the flat names
   (``flatten_named(sample inputs)`` / ``flatten_named(eager output)``) are recorded on the
   returned manager (``hfexport_io``) and written by ``save`` as a JSON side file ``<name>.pte.json``
   together with the ``.pte`` (atomically). A ``.pte`` without the side file runs with positional names.

Static caches: by default a StaticCache in the sample stays a graph input (USER_INPUT_MUTATION; with
the three ``alloc_*`` flags False a C++ runtime binds it to caller-owned memory, see
examples/cpp/decode.cpp). ``ExecutorchExporter(cache_as_buffers=True)`` makes it program-owned
mutable state instead (``CacheOwner``), which the Python runtime keeps across calls: measured on
the tiny llama decode graph, 0.35 ms/step vs 0.49 ms/step with the cache as inputs.

Batch-1 samples: ``trace`` keeps size-1 axes symbolic by tracing size-obliviously
(``shapes.symbolic_size_one``). The EXIR passes re-trace the graph (``to_edge`` runs the
decompositions again) with the sample sizes as hints; outside that mode a hint of 1 bakes
broadcasting decisions (``expand``, ``arange`` lengths) into the edge program, which then
runs at batch 1 only ("expanded size 16 must match 8", "resize a bounded tensor with max
capacity 2 to 3"). Lowering therefore runs in the same tracing mode as the trace
(``Trace.mode``), as ``DynamoExporter`` does for its own decompositions; a batch-1
sample then serves batch 1, 2 and 3 (tested).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from .. import dim_bounds
from ..base import HfExporter
from ..cache_owner import CacheOwner
from ..configs import ExecutorchConfig, ExportConfigMixin, ExportFormat
from ..dim_bounds import DEFAULT_MAX_LENGTH, DEFAULT_SSM_MAX_LENGTH
from ..errors import HfExportError
from ..graph_inputs import split_inputs
from ..io import atomic_output
from ..outputs import flatten_named, spec_leaf_names
from ..registry import register_exporter
from ..tracing import Trace, brief
from . import checks, fixes  # noqa: F401 (register their patches)
from .passes import check_updated_inputs_keep_their_storage, run_edge_passes
from .speedups import fusion, retraces  # noqa: F401 (register their patches)

logger = logging.getLogger(__name__)

# Upper bounds for dynamic axes that have none (see module doc); ExecutorchExporter(max_batch=, max_length=) overrides
# them. The sequence bound is lowered to the model's position limit or a static cache's slots where smaller, and for
# models with none (dim_bounds.sequence_bound, where DEFAULT_MAX_LENGTH and the others live).
DEFAULT_MAX_BATCH = 8
# Suffix of the JSON side file that carries the input/output names of a saved program.
SIDE_SUFFIX = ".json"
# Attribute of the returned ExecutorchProgramManager that carries the same record.
IO_ATTR = "hfexport_io"


def side_file(path: str | Path) -> Path:
    """Where the names of the program saved at ``path`` live: ``<name>.pte.json`` next to it."""
    path = Path(path)
    return path.with_name(path.name + SIDE_SUFFIX)


@register_exporter("executorch")
class ExecutorchExporter(HfExporter):
    """transformers model -> ``executorch.exir.ExecutorchProgramManager`` (see the module doc for the stages)."""

    export_format = ExportFormat.EXECUTORCH
    widen_batch1_components = True  # lowering pins a batch-1 x 1-token decode step's batch*query to 1
    config_class = ExecutorchConfig
    required_packages = ["torch", "transformers", "executorch"]
    min_versions = {"torch": "2.11.0"}
    # One trace straight into the ATen program EXIR's lowering would decompose the training-IR program into
    # (``speedups.retraces``), so that the lowering's decomposition retraces find nothing left to do; a batch the
    # tied trace pins is traced again from batch 2.
    tracer = Trace(
        patch_backends=("dynamo", "executorch"),
        export_format="executorch",
        decompositions=lambda config: retraces.split_decomposition_table(config.backend),
        retrace_tied_batch=True,
    )
    file_suffix = ".pte"

    def __init__(
        self,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_length: int = DEFAULT_MAX_LENGTH,
        cache_as_buffers: bool = False,
        max_planned_memory: int | None = None,
    ) -> None:
        """``cache_as_buffers``: a StaticCache in the sample becomes state the program owns (see ``CacheOwner``).
        ``max_planned_memory``: bytes of planned activations above which the export is refused (default: this
        machine's physical memory, where such a program cannot load; ``dim_bounds.check_planned_memory``)."""
        super().__init__()
        if max_batch < 2 or max_length < 2:
            raise ValueError(f"max_batch and max_length must be >= 2, got {max_batch}, {max_length}")
        self.max_batch = int(max_batch)
        self.max_length = int(max_length)
        self.cache_as_buffers = bool(cache_as_buffers)
        self.max_planned_memory = max_planned_memory

    # -- export -----------------------------------------------------------------------------------
    def export(self, model: Any, sample_inputs: Mapping[str, Any], config: ExportConfigMixin | None = None) -> Any:
        """Trace, bound, lower and plan; returns the ExecutorchProgramManager with ``hfexport_io`` names."""
        config = cast(ExecutorchConfig, self.resolve_config(config))  # resolve_config checked the format
        if config.backend == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                "ExecutorchConfig(backend='cuda') needs a CUDA device, and torch.cuda.is_available() is False here. "
                "Export with backend='xnnpack' (CPU) or 'portable', or run on a machine with CUDA."
            )
        graph_inputs, _ = split_inputs(sample_inputs)
        owned: dict[str, str] = {}
        if self.cache_as_buffers:
            model, sample_inputs, owned = CacheOwner.wrap(model, sample_inputs)
            graph_inputs, _ = split_inputs(sample_inputs)
        input_names = list(flatten_named(graph_inputs).keys())
        start = time.perf_counter()
        plan = self.shape_plan(config)
        if owned:  # the owned cache fixes the batch (ShapePlan.static_batch)
            plan = dataclasses.replace(plan, static_batch=True)
        program = self.trace(model, sample_inputs, config, plan)
        bounds = self.bound_dynamic_dims(program, graph_inputs, getattr(model, "wrapped", model))
        dynamic_axes = dim_bounds.dynamic_axes(program, input_names)
        manager = self.lower(program, config, plan)
        io = self._io_record(manager, input_names, config, bounds)
        io["input_dynamic_axes"] = dynamic_axes
        io["sample_shapes"] = {n: list(t.shape) for n, t in flatten_named(graph_inputs).items()}
        if owned:
            io["owned_inputs"] = owned
            io["sample_shapes"].update({n: list(model.get_buffer(a).shape) for n, a in owned.items()})
        setattr(manager, IO_ATTR, io)
        logger.info(
            "ExecuTorch export of %s (%s) took %.1fs", type(model).__name__, config.backend, time.perf_counter() - start
        )
        return manager

    @property
    def ties_batch(self) -> bool:  # type: ignore[override]
        """The token inputs' batch axes are one Dim (``shapes.tie_batch_axes``), except with a program-owned cache:
        its buffers fix the batch, which ``export`` then keeps static (``ShapePlan.static_batch``)."""
        return not self.cache_as_buffers

    # -- bounds -----------------------------------------------------------------------------------
    def bound_dynamic_dims(
        self, program: torch.export.ExportedProgram, graph_inputs: Mapping[str, Any], model: Any = None
    ) -> dict[str, list[int]]:
        """Give every unbounded symbol an upper bound, in place; returns {symbol: [min, max]} of all symbols."""
        return dim_bounds.bound_dynamic_dims(program, graph_inputs, model, self.max_batch, self.max_length)

    # -- lowering ---------------------------------------------------------------------------------
    def partitioners(self, config: ExecutorchConfig) -> list[Any]:
        if config.backend == "xnnpack":
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

            return [XnnpackPartitioner()]
        if config.backend == "cuda":
            try:
                from executorch.backends.cuda.cuda_backend import CudaBackend
                from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
            except ImportError as exc:
                raise HfExportError(f"this executorch build has no CUDA backend: {exc}", stage="lowering") from exc
            return [CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])]
        return []  # portable: no delegate, the portable/optimized kernels run every op

    def backend_config(self, config: ExecutorchConfig) -> Any:
        from executorch.exir import ExecutorchBackendConfig
        from executorch.exir.passes import MemoryPlanningPass

        return ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(
                alloc_graph_input=config.alloc_graph_input,
                alloc_graph_output=config.alloc_graph_output,
                alloc_mutable_buffers=config.alloc_mutable_buffers,
            ),
            emit_mutable_buffer_names=True,
        )

    def lower(self, program: torch.export.ExportedProgram, config: ExecutorchConfig, plan: Any = None) -> Any:
        """ExportedProgram (bounded) -> ExecutorchProgramManager, in the trace's mode (``plan``: the export's)."""
        from executorch.exir import to_edge_transform_and_lower

        plan = self.shape_plan(config) if plan is None else plan
        start = time.perf_counter()
        try:
            edge_config, partitioners = fixes.edge_compile_config(program), self.partitioners(config)
            with fixes.lowering_patches(), self.tracer.mode(plan, config), torch.no_grad():
                edge = to_edge_transform_and_lower(program, partitioner=partitioners, compile_config=edge_config)
        except HfExportError:
            raise
        except Exception as exc:
            raise HfExportError(
                f"ExecuTorch lowering (to_edge_transform_and_lower, backend={config.backend!r}) failed: "
                f"{type(exc).__name__}: {brief(exc)}\nTry: backend='portable' to see whether the delegate is the "
                "cause, or register a patch for the op named above (register_patch('executorch', ...)).",
                stage="lowering",
            ) from exc
        lowered = time.perf_counter()
        self._check_still_dynamic(program, edge)
        run_edge_passes(edge)
        try:
            with fixes.lowering_patches(), self.tracer.mode(plan, config):
                manager = edge.to_executorch(self.backend_config(config))
        except Exception as exc:
            raise HfExportError(
                f"ExecuTorch to_executorch (memory planning, emission) failed: {type(exc).__name__}: {brief(exc)}",
                stage="lowering",
            ) from exc
        logger.info(
            "ExecuTorch lowering took %.1fs, to_executorch %.1fs", lowered - start, time.perf_counter() - lowered
        )
        check_updated_inputs_keep_their_storage(manager)
        dim_bounds.check_planned_memory(manager, self.max_batch, self.max_length, self.max_planned_memory)
        return manager

    @staticmethod
    def _check_still_dynamic(program: torch.export.ExportedProgram, edge: Any) -> None:
        """A pass that guards on a hint turns a dynamic axis static silently: say so instead."""

        def dims(ep: Any) -> list[tuple[str, list[bool]]]:
            user = [
                s.arg.name
                for s in ep.graph_signature.input_specs
                if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")
            ]
            nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
            out = []
            for name in user:
                val = nodes[name].meta.get("val") if name in nodes else None
                if isinstance(val, torch.Tensor):
                    out.append((name, [isinstance(d, torch.SymInt) for d in val.shape]))
            return out

        try:
            after = dims(edge.exported_program())
        except Exception:  # pragma: no cover - introspection only
            return
        before = dims(program)
        lost = [
            f"{a[0]} axis {i}" for a, b in zip(after, before) for i, (x, y) in enumerate(zip(a[1], b[1])) if y and not x
        ]
        if lost:
            logger.warning(
                "ExecuTorch lowering made dynamic axes static (%s): the program will refuse other "
                "sizes on them. A pass guarded on the sample size; please report it.",
                ", ".join(lost),
            )

    # -- names --------------------------------------------------------------------------------------
    @staticmethod
    def _io_record(
        manager: Any, input_names: list[str], config: ExecutorchConfig, bounds: dict[str, list[int]]
    ) -> dict[str, Any]:
        """Names of the method's positional inputs and outputs, in runtime order."""
        ep = manager.exported_program("forward")
        signature = ep.graph_signature
        user_inputs = [s for s in signature.input_specs if s.kind.name == "USER_INPUT"]
        if len(user_inputs) == len(input_names):
            by_placeholder = {s.arg.name: n for s, n in zip(user_inputs, input_names) if hasattr(s.arg, "name")}
            names_in = list(input_names)
        else:
            logger.warning(
                "the program has %d user inputs but the sample flattens to %d names; inputs keep positional names",
                len(user_inputs),
                len(input_names),
            )
            by_placeholder = {}
            names_in = [f"input_{i}" for i in range(len(user_inputs))]
        user_outputs = [s for s in signature.output_specs if s.kind.name == "USER_OUTPUT"]
        out_names = spec_leaf_names(ep.call_spec.out_spec) if ep.call_spec.out_spec is not None else []
        if len(out_names) != len(user_outputs):
            out_names = [f"output_{i}" for i in range(len(user_outputs))]
        # The runtime returns mutated user inputs first (their new values), then the user outputs;
        # buffer mutations stay inside the program.
        mutated = []
        for spec in signature.output_specs:
            if spec.kind.name == "USER_INPUT_MUTATION":
                mutated.append(by_placeholder.get(spec.target, spec.target))
        return {
            "format": "hfexport.executorch/1",
            "inputs": names_in,
            "outputs": mutated + out_names,
            "mutated_inputs": mutated,
            "mutable_buffers": [s.target for s in signature.output_specs if s.kind.name == "BUFFER_MUTATION"],
            "dynamic_dims": bounds,
            "backend": config.backend,
            "alloc": {
                "graph_input": config.alloc_graph_input,
                "graph_output": config.alloc_graph_output,
                "mutable_buffers": config.alloc_mutable_buffers,
            },
        }

    # -- artifacts ----------------------------------------------------------------------------------
    @classmethod
    def save(cls, program: Any, path: str) -> list[str]:
        """Write ``path`` (.pte) and ``<path>.json`` (names) atomically: both files or neither."""
        target = Path(path)
        if target.suffix != cls.file_suffix:
            raise ValueError(f"an ExecuTorch program is saved as a {cls.file_suffix} file, got {target.name!r}")
        io = getattr(program, IO_ATTR, None)
        side = side_file(target)
        written = [str(target)]
        try:
            with atomic_output(target) as tmp:
                with open(tmp / target.name, "wb") as f:
                    program.write_to_file(f)
                if io is not None:
                    (tmp / side.name).write_text(json.dumps(io, indent=1))
                    written.insert(0, str(side))
        except HfExportError:
            raise
        except Exception as exc:
            raise HfExportError(
                f"saving the ExecuTorch program to {target} failed: {type(exc).__name__}: {exc}", stage="save"
            ) from exc
        if io is None and side.exists():
            logger.warning("%s is left from an earlier save; it does not describe this program", side)
        return written

    @classmethod
    def load(cls, path: str) -> Any:
        """The saved program as an ``executorch.runtime`` Program (names: ``read_io(path)``)."""
        from executorch.runtime import Runtime

        return Runtime.get().load_program(Path(path))


def read_io(path: str | Path) -> dict[str, Any] | None:
    """The names recorded next to a saved program, or None when there is no side file."""
    side = side_file(path)
    if not side.exists():
        return None
    return json.loads(side.read_text())


__all__ = [
    "ExecutorchExporter",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_SSM_MAX_LENGTH",
    "read_io",
    "side_file",
]

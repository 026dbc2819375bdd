"""One regeneration of the program's code per partitioning (``hfexport/executorch/speedups/fusion.py``).

With the patch, ``to_backend`` regenerates the partitioned module's code once instead of after every partition
cut; the emitted program must be byte for byte the one EXIR's way gives (the patch taken out), and the module's
code, once the cutting is over, must be its graph's. The fault, a deferral that never regenerates, leaves code
from before the cuts and is told apart by that second check.
"""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("executorch")

from hfexport import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.executorch.speedups import fusion as executorch_fusion  # noqa: E402
from hfexport.executorch.fixes import LOWERING  # noqa: E402
from hfexport.patching.registry import PATCHES, Patch  # noqa: E402

from helpers import zoo_model  # noqa: E402

FACTORY = executorch_fusion._cut_partitions_with_one_regeneration


def never_regenerates(original):
    """Fault: holds the regeneration back and never makes it up."""

    @functools.wraps(original)
    def create(tagged_graph_module, *args, **kwargs):
        object.__setattr__(tagged_graph_module, "recompile", lambda: None)
        try:
            return original(tagged_graph_module, *args, **kwargs)
        finally:
            object.__delattr__(tagged_graph_module, "recompile")

    return create


def with_factory(monkeypatch, factory):
    """The lowering set with the fusion patch's factory swapped (None: taken out)."""
    patches = [p if p.factory is not FACTORY else Patch(p.backend, p.path, factory, p.reason)
               for p in PATCHES[LOWERING] if factory is not None or p.factory is not FACTORY]
    assert patches != PATCHES[LOWERING]
    monkeypatch.setitem(PATCHES, LOWERING, patches)


def lower(monkeypatch):
    """(the emitted program's bytes, whether the partitioned module's code was its graph's once the partitions
    were cut, how many times that module's code was regenerated while they were)."""
    from executorch.exir.backend import backend_api

    seen = {}
    regenerations = []
    recompile = torch.fx.GraphModule.recompile

    def counted(self):
        if self is seen.get("module"):
            regenerations.append(1)
        return recompile(self)

    cut = backend_api._create_partitions

    def checked(tagged_graph_module, *args, **kwargs):
        seen["module"] = tagged_graph_module
        result = cut(tagged_graph_module, *args, **kwargs)
        seen["current"] = tagged_graph_module.code == tagged_graph_module.graph.python_code("self").src
        seen["module"] = None
        return result

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counted)
    monkeypatch.setattr(backend_api, "_create_partitions", checked)
    entry, model = zoo_model("llama")
    manager = ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    return manager.buffer, seen["current"], len(regenerations)


def test_one_regeneration_gives_exir_s_program_and_current_code(monkeypatch):
    program, current, regenerations = lower(monkeypatch)
    assert current and regenerations == 1
    with monkeypatch.context() as patch:
        with_factory(patch, None)
        reference, reference_current, reference_regenerations = lower(patch)
    assert reference_current and reference_regenerations > 10  # one per partition: llama has 29
    assert program == reference


def test_a_deferral_that_never_regenerates_is_caught(monkeypatch):
    with_factory(monkeypatch, never_regenerates)
    _, current, regenerations = lower(monkeypatch)
    assert not current and regenerations == 0

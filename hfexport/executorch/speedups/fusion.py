"""One regeneration of a program's Python code per partitioning, not one per partition (``executorch_lowering``).

``to_backend`` cuts each delegate partition out of the program in turn (``create_submodule_from_nodes``) and after
each cut sorts the whole graph again (``legalize_graph``), assigning the sorted graph to the module. The assignment
regenerates the module's Python code. A tiny T5's generation export has 92 partitions over its three programs, and
those regenerations took about 1.5 of its 26 seconds (a throwaway profile).

Between two cuts only the graph is read: the cut, the sort and each partition's own program work on nodes, and no
code of the module runs. This patch holds the module's regeneration back while ``to_backend`` cuts the partitions
of one graph, and regenerates its code once when the cutting ends, failed or not. The graph, its order and the code
are the ones each cut would have left (``tests/test_executorch_fusion.py`` compares the emitted programs and the
code). In between, only a debug log line formats the module with its code as it was before the cuts.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...patching.registry import register_patch
from ..fixes import LOWERING


@contextlib.contextmanager
def code_regenerated_once(graph_module: torch.fx.GraphModule) -> Iterator[None]:
    """While active, ``graph_module.recompile()`` only notes that the code is out of date; on exit the code is
    regenerated once if it was asked for. The instance attribute shadows the class's method, and goes."""
    asked: list[bool] = []
    object.__setattr__(graph_module, "recompile", lambda: asked.append(True))
    try:
        yield
    finally:
        object.__delattr__(graph_module, "recompile")
        if asked:
            graph_module.recompile()


def _cut_partitions_with_one_regeneration(original: Callable) -> Callable:
    @functools.wraps(original)
    def create(tagged_graph_module: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        with code_regenerated_once(tagged_graph_module):
            return original(tagged_graph_module, *args, **kwargs)

    return create


register_patch(
    LOWERING,
    "executorch.exir.backend.backend_api._create_partitions_in_graph_module",
    reason="to_backend re-sorts the whole program after cutting out each partition, and the sorted graph's "
    "assignment regenerates the module's code every time; regenerated once after the last cut instead. Drop when "
    "EXIR sorts once per partitioning.",
    speedup=True,
)(_cut_partitions_with_one_regeneration)

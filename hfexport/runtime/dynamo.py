"""Runner for torch.export programs (.pt2 files or in-memory ExportedPrograms)."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from .. import caches
from ..outputs import flatten_named
from .base import Runner


class DynamoRunner(Runner):
    """Rebuilds the program's structured inputs (caches included) from flat names, using the
    program's own example inputs as the template, then calls ``program.module()``."""

    backend = "dynamo"

    def __init__(self, program: Any) -> None:
        caches.register_cache_pytrees()
        if not isinstance(program, torch.export.ExportedProgram):
            program = torch.export.load(str(program))
        self.program = program
        self.module = program.module()
        if program.example_inputs is None:
            raise ValueError("this ExportedProgram carries no example_inputs; re-export it with hfexport")
        _, self._template = program.example_inputs
        self._names = list(flatten_named(self._template).keys())

    @property
    def input_names(self) -> list[str]:
        return self._names

    def structured(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Flat named inputs -> the kwargs the program was traced with. The leaves come from the saved example
        inputs (ints stay ints); the structure from the program's call spec (a saved example may hold plain
        dicts where the trace had ModelOutputs)."""
        leaves, template_spec = pytree.tree_flatten(self._template)
        values = [flat_inputs[n] for n in self._names]
        rebuilt: list[Any] = []
        it = iter(values)
        for leaf in leaves:
            if leaf is None:
                rebuilt.append(None)
                continue
            value = next(it)
            rebuilt.append(int(value) if isinstance(leaf, int) and isinstance(value, torch.Tensor) else value)
        in_spec = self.program.call_spec.in_spec
        if in_spec is not None and in_spec.num_leaves == len(rebuilt):
            _, kwargs = pytree.tree_unflatten(rebuilt, in_spec)
            return kwargs
        return pytree.tree_unflatten(rebuilt, template_spec)

    def run_flat(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            out = self.module(**self.structured(flat_inputs))
        return flatten_named(out)

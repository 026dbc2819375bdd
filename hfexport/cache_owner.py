"""CacheOwner: a model whose StaticCache the ExecuTorch program owns as mutable buffers (one job, one class)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree

from . import caches
from .errors import HfExportError


class CacheOwner(torch.nn.Module):
    """The model with its StaticCache held as buffers: ExecuTorch then owns the cache as mutable state.

    Why: the Python runtime copies graph inputs in and outputs out on every call, so a cache passed as
    an input costs two copies of the whole cache per decode step. Buffers the graph mutates
    (BUFFER_MUTATION) persist inside the program across ``execute()`` calls instead, and
    ``emit_mutable_buffer_names`` lets a runtime reach them by name (to reset or fill them).
    The forward rebuilds the cache object around the buffers on every call, so the cache's own
    in-place writes land in them (and the trace sees buffers, not captured constants).
    """

    def __init__(self, model: torch.nn.Module, cache_name: str, cache: Any) -> None:
        super().__init__()
        self.wrapped = model
        self.cache_name = cache_name
        leaves, self._spec = pytree.tree_flatten(cache)
        names = list(caches.named_cache_tensors(cache, cache_name))
        if len(names) != len(leaves) or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise HfExportError(
                f"the {cache_name} cache has non-tensor state; it cannot become buffers", stage="export"
            )
        self.attributes: dict[str, str] = {}
        for name, leaf in zip(names, leaves):
            attr = name.replace(".", "_")
            self.register_buffer(attr, leaf.detach().clone(), persistent=False)
            self.attributes[name] = attr

    @property
    def config(self) -> Any:
        return getattr(self.wrapped, "config", None)

    def forward(self, **kwargs: Any) -> Any:
        cache = pytree.tree_unflatten([self.get_buffer(a) for a in self.attributes.values()], self._spec)
        out = self.wrapped(**kwargs, **{self.cache_name: cache})
        if isinstance(out, Mapping):  # the cache is state now, not an output (the runner reads it back)
            return {k: v for k, v in out.items() if k != self.cache_name}
        return out

    @classmethod
    def wrap(cls, model: Any, sample_inputs: Mapping[str, Any]) -> tuple[Any, dict[str, Any], dict[str, str]]:
        """(module to export, its sample inputs, {flat cache name: attribute}); unchanged without a StaticCache."""
        from transformers import StaticCache

        static = [k for k, v in sample_inputs.items() if isinstance(v, StaticCache)]
        if not static:
            return model, dict(sample_inputs), {}
        name = static[0]
        owner = cls(model, name, caches.clone_cache(sample_inputs[name]))
        rest = {k: v for k, v in sample_inputs.items() if k != name}
        return owner, rest, dict(owner.attributes)


__all__ = ["CacheOwner"]

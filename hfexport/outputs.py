"""Named, flat views of model outputs: the one naming used by ONNX outputs, runners and comparisons.

Eager returns ModelOutput objects holding caches; exported programs return
pytrees; ONNX and ExecuTorch return flat lists. Comparing them needs one naming
for every tensor: ``logits``, ``last_hidden_state``,
``past_key_values.layers.0.keys``, ``encoder_hidden_states.1``...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from . import caches
from .patching.renames import CACHE_ARGUMENT


def flatten_named(value: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in ``value`` under a dotted name, in pytree order; None entries are dropped."""
    out: dict[str, torch.Tensor] = {}

    def join(name: Any) -> str:
        return f"{prefix}.{name}" if prefix else str(name)

    if value is None:
        return out
    if isinstance(value, torch.Tensor):
        out[prefix or "output"] = value
    elif caches.is_cache(value):
        for name, leaf in caches.named_cache_tensors(value, prefix or CACHE_ARGUMENT.current()).items():
            out[name] = leaf if isinstance(leaf, torch.Tensor) else torch.tensor(int(leaf))
    elif isinstance(value, Mapping):  # ModelOutput is an OrderedDict of its non-None fields
        for k, v in value.items():
            out.update(flatten_named(v, join(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out.update(flatten_named(v, join(i)))
    elif hasattr(value, "__dict__") and not isinstance(value, (int, float, bool, str)):
        for k, v in vars(value).items():
            out.update(flatten_named(v, join(k)))
    return out


def spec_leaf_names(spec: Any) -> list[str]:
    """Flat names of a pytree spec's leaves, as ``flatten_named`` names the real values.

    ONNX and ExecuTorch graphs take and return flat lists; this names each position from the
    program's input/output spec (``output_<i>`` where a leaf has no tensor name).
    """
    import torch.utils._pytree as pytree

    n = spec.num_leaves
    markers = [torch.empty(0) for _ in range(n)]
    rebuilt = pytree.tree_unflatten(markers, spec)
    by_id = {id(m): i for i, m in enumerate(markers)}
    names: list[str | None] = [None] * n
    for name, tensor in flatten_named(rebuilt).items():
        index = by_id.get(id(tensor))
        if index is not None and names[index] is None:
            names[index] = name
    return [name if name is not None else f"output_{i}" for i, name in enumerate(names)]

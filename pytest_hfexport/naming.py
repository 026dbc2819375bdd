"""The judge's naming of tensors inside structured values: one flat name per tensor.

Eager models return ModelOutputs that hold caches; exported artifacts return flat
lists or dicts. Comparing them needs one naming that every implementation's adapter
agrees to: ``logits``, ``encoder_last_hidden_state``, ``hidden_states.1``,
``past_key_values.layers.0.keys``, ``past_key_values.self_attention_cache.layers.1.values``.

Rules: a mapping contributes its keys, a sequence its indices, any other object
(a cache, a cache layer) its instance attributes; only tensors are named, in the
order they are reached; ``None`` and plain Python values are not tensors and get no
name. This module is the contract, written here so the judge does not borrow the
naming of the implementation it judges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

# Objects whose attributes are never walked: they hold no model state.
_OPAQUE_MODULES = ("torch", "builtins", "numpy", "enum", "typing", "types")


def _walkable(value: Any) -> bool:
    if not hasattr(value, "__dict__") or isinstance(value, type):
        return False
    module = type(value).__module__ or ""
    return module.split(".")[0] not in _OPAQUE_MODULES


def iter_named(value: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any, str]]:
    """Yield ``(name, tensor, owner, key)`` for every tensor in ``value``: where it lives, so callers can
    replace it (``owner[key]`` for mappings and lists, ``setattr(owner, key)`` for objects)."""
    import torch

    seen: set[int] = set()

    def join(name: Any, base: str) -> str:
        return f"{base}.{name}" if base else str(name)

    def walk(obj: Any, base: str) -> Iterator[tuple[str, Any, Any, str]]:
        if isinstance(obj, Mapping):
            items = list(obj.items())
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        elif _walkable(obj):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            items = list(vars(obj).items())
        else:
            return
        for key, child in items:
            name = join(key, base)
            if isinstance(child, torch.Tensor):
                yield name, child, obj, key
            elif child is not None:
                yield from walk(child, name)

    if isinstance(value, torch.Tensor):
        yield prefix or "output", value, None, ""
        return
    yield from walk(value, prefix)


def flat_named(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor in ``value`` under its flat name (see the module doc)."""
    return {name: tensor for name, tensor, _, _ in iter_named(value, prefix)}


def replace_named(value: Any, values: Mapping[str, Any], prefix: str = "") -> tuple[Any, list[str]]:
    """``value`` with ``values[name]`` in place of each named tensor; returns ``(new value, names values lacked)``.

    Mappings (ModelOutputs included), lists and objects (caches) are updated in place; tuples are rebuilt,
    so use the returned value. A tensor whose name ``values`` lacks is left as it was and listed."""
    import torch

    missing: list[str] = []
    seen: set[int] = set()

    def join(name: Any, base: str) -> str:
        return f"{base}.{name}" if base else str(name)

    def rebuild(obj: Any, base: str) -> Any:
        if isinstance(obj, torch.Tensor):
            name = base or "output"
            if name not in values:
                missing.append(name)
                return obj
            return values[name]
        if isinstance(obj, tuple):
            return (
                type(obj)(*(rebuild(c, join(i, base)) for i, c in enumerate(obj)))
                if hasattr(obj, "_fields")
                else tuple(rebuild(c, join(i, base)) for i, c in enumerate(obj))
            )
        if isinstance(obj, (Mapping, list)):
            container: Any = obj  # mappings here are dicts or ModelOutputs: both take item assignment
            keys = list(container.keys()) if isinstance(obj, Mapping) else list(range(len(obj)))
            for key in keys:
                child = container[key]
                if child is not None:
                    new = rebuild(child, join(key, base))
                    if new is not child:
                        container[key] = new
            return obj
        if _walkable(obj) and id(obj) not in seen:
            seen.add(id(obj))
            for key, child in list(vars(obj).items()):
                if child is not None:
                    new = rebuild(child, join(key, base))
                    if new is not child:
                        setattr(obj, key, new)
        return obj

    return rebuild(value, prefix), missing


def map_tensors(value: Any, fn: Callable[[str, Any], Any], prefix: str = "") -> Any:
    """``value`` with every named tensor replaced by ``fn(name, tensor)`` (objects and mutable containers in place)."""
    new, _ = replace_named(value, {name: fn(name, t) for name, t in flat_named(value, prefix).items()}, prefix)
    return new


def cache_entry(values: Mapping[str, Any] | Any) -> tuple[str | None, Any]:
    """``(name, cache)`` of the transformers cache a call's arguments or a model's output holds, by what the value
    is, not by a keyword: the name follows the model's own signature (``past_key_values`` before transformers 5.25,
    ``cache`` from 5.25, a state-space model's ``cache_params``), so the judge's references and loops serve every
    release of the window. ``(None, None)`` where there is none."""
    try:
        from transformers.cache_utils import Cache
    except ImportError:  # pragma: no cover
        return None, None
    items = values.items() if isinstance(values, Mapping) else vars(values).items() if _walkable(values) else ()
    for name, value in items:
        if isinstance(value, Cache):
            return str(name), value
    return None, None

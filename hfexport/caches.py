"""Cache objects as pytrees, so torch.export can trace through them and load them back.

One generic rule serves every ``transformers.Cache`` subclass: the tensors found
in the cache's object graph (its layers, nested caches) are the children; the
rest (classes, flags, window sizes) is a JSON string context, so
``torch.export.save``/``load`` can write and read it. Attributes that merely
restate a tensor's shape (batch size, heads, cache length, dtype, device) are
left out of the context and recomputed on unflatten: otherwise a program traced
at batch 2 would refuse a cache of batch 3 because the tree specs differ.

Registration is idempotent and covers every Cache subclass known at the time of
the call (``register_cache_pytrees``), so importing hfexport and then
``torch.export.load(path)`` is enough in a fresh process.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
from typing import Any

import torch
import torch.utils._pytree as pytree

logger = logging.getLogger(__name__)

# Layer attributes derived from the layer's tensors: recomputed on unflatten, never in the spec.
DERIVED_FROM_TENSORS = {
    "batch_size": lambda o: o.keys.shape[0],
    "num_heads": lambda o: o.keys.shape[1],
    "max_cache_len": lambda o: o.keys.shape[2],
    "k_head_dim": lambda o: o.keys.shape[-1],
    "v_head_dim": lambda o: o.values.shape[-1],
    "dtype": lambda o: o.keys.dtype,
    "device": lambda o: o.keys.device,
}
# Python-int token counters that a decode call restates (a sliding layer's count of tokens seen: the
# 2D mask has past + query columns, see patching.sliding_window). Kept in the spec they would pin a
# program to the sample's past length (torch.export refuses another spec); left out, they are
# recomputed on unflatten from the stored length, which is exact until the layer's window fills.
COUNTERS_FROM_TENSORS = {
    "cumulative_length": lambda o: o.keys.shape[-2],
}
# Any other Python-int attribute is part of the spec, except when tracing made it a symbol (a token
# count in a returned cache): then it is a leaf, a symbolic int output of the graph.
# Attributes of a cache class (or a subclass) that come first, in the model's own order: the rest follow sorted
# by name (a copy may reorder ``__dict__``). Tensors leave a program in this order, and a positional caller (an
# ExecuTorch method's outputs carry no names) reads them in the model's order, where sorting would reverse it: an
# EncoderDecoderCache holds its self-attention cache before its cross-attention one; a state-space layer its conv
# and recurrent states before the token count transformers 5.25 added (cumulative_length_linear, a tensor).
ATTRIBUTES_FIRST = {
    "EncoderDecoderCache": ("self_attention_cache", "cross_attention_cache"),
    "LinearAttentionCacheLayerMixin": ("conv_states", "recurrent_states"),
}
# Attributes that never travel (runtime-only handles, and the record of recomputed counters).
_RECOMPUTED = "_hfexport_recomputed_counters"
SKIPPED_ATTRIBUTES = {"prefetch_stream", _RECOMPUTED}

_TENSOR = "__tensor__"


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _class_from_path(path: str) -> Any:  # a class
    module, qualname = path.split(":", 1)
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _encode(value: Any, tensors: list[Any], where: str, names: list[str] | None = None) -> Any:
    """Object graph -> JSON-safe structure, tensors replaced by their index in ``tensors``."""
    if isinstance(value, (torch.Tensor, torch.SymInt)):
        tensors.append(value)
        if names is not None:
            names.append(where)
        return {_TENSOR: len(tensors) - 1}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"__device__": str(value)}
    if isinstance(value, type):
        return {"__class__": _class_path(value)}
    if isinstance(value, (list, tuple)):
        return {
            "__seq__": type(value).__name__,
            "items": [_encode(v, tensors, f"{where}.{i}", names) for i, v in enumerate(value)],
        }
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in value):
            raise TypeError(f"cache attribute {where} is a dict with keys other than str/int; cannot flatten it")
        return {"__map__": [[k, _encode(v, tensors, f"{where}.{k}", names)] for k, v in value.items()]}
    if hasattr(value, "__dict__"):
        return _encode_object(value, tensors, where, names)
    raise TypeError(
        f"cache attribute {where} holds a {type(value).__name__}, which hfexport cannot flatten for torch.export; "
        "register a pytree node for this cache class yourself (torch.utils._pytree.register_pytree_node)"
    )


def _encode_object(obj: Any, tensors: list[torch.Tensor], where: str, names: list[str] | None = None) -> dict:
    attrs = {}
    derivable = isinstance(getattr(obj, "keys", None), torch.Tensor) and isinstance(
        getattr(obj, "values", None), torch.Tensor
    )
    derived = []
    for name, value in sorted(vars(obj).items(), key=_attribute_order(type(obj))):
        if name in SKIPPED_ATTRIBUTES:
            continue
        if derivable and (name in DERIVED_FROM_TENSORS or _restated_counter(obj, name, value)):
            derived.append(name)
            continue
        attrs[name] = _encode(value, tensors, f"{where}.{name}", names)
    return {"__object__": _class_path(type(obj)), "derived": sorted(derived), "attrs": attrs}


def _attribute_order(cls: type) -> Any:
    """Sort key over ``(name, value)`` items: ``ATTRIBUTES_FIRST``'s names in its order, then by name."""
    first = next((ATTRIBUTES_FIRST[c.__name__] for c in cls.__mro__ if c.__name__ in ATTRIBUTES_FIRST), ())
    return lambda item: (first.index(item[0]) if item[0] in first else len(first), item[0])


def _restated_counter(obj: Any, name: str, value: Any) -> bool:
    """A counter left out of the spec: a plain int, or the value unflatten recomputed (a symbol while tracing)
    that nothing has reassigned since. A count the graph computed (``+= query``) stays a leaf: an output."""
    if name not in COUNTERS_FROM_TENSORS:
        return False
    return type(value) is int or vars(obj).get(_RECOMPUTED, {}).get(name) is value


def _decode(data: Any, tensors: list[Any]) -> Any:
    if not isinstance(data, dict):
        return data
    if _TENSOR in data:
        return tensors[data[_TENSOR]]
    if "__dtype__" in data:
        return getattr(torch, data["__dtype__"])
    if "__device__" in data:
        return torch.device(data["__device__"])
    if "__class__" in data:
        return _class_from_path(data["__class__"])
    if "__seq__" in data:
        items = [_decode(v, tensors) for v in data["items"]]
        return tuple(items) if data["__seq__"] == "tuple" else items
    if "__map__" in data:
        return {k: _decode(v, tensors) for k, v in data["__map__"]}
    if "__object__" in data:
        cls = _class_from_path(data["__object__"])
        obj = cls.__new__(cls)  # no __init__: the attributes follow
        for name, value in data["attrs"].items():
            setattr(obj, name, _decode(value, tensors))
        for name in data.get("derived", []):
            try:
                value = {**COUNTERS_FROM_TENSORS, **DERIVED_FROM_TENSORS}[name](obj)
            except (AttributeError, IndexError, TypeError):
                continue  # symbolic or placeholder leaves during spec handling
            setattr(obj, name, value)
            if name in COUNTERS_FROM_TENSORS:
                vars(obj).setdefault(_RECOMPUTED, {})[name] = value
        return obj
    raise ValueError(f"unknown cache context entry {data!r}")


def flatten_cache(cache: Any) -> tuple[list[torch.Tensor], str]:
    tensors: list[torch.Tensor] = []
    context = _encode_object(cache, tensors, type(cache).__name__)
    return tensors, json.dumps(context, sort_keys=True)


def unflatten_cache(values: Any, context: str) -> Any:
    return _decode(json.loads(context), list(values))


def _flatten_with_keys(cache: Any):
    tensors, context = flatten_cache(cache)
    return [(pytree.SequenceKey(i), t) for i, t in enumerate(tensors)], context


def _subclasses(root: type) -> list[type]:
    """``root`` and every subclass of it imported so far."""
    out, todo = [], [root]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


def cache_classes() -> list[type]:
    """Every Cache subclass currently imported, the base included."""
    from transformers.cache_utils import Cache

    return _subclasses(Cache)


def register_cache_pytree(cls: type) -> bool:
    """Register one cache class; False when it already had a pytree node (ours or someone else's)."""
    if cls in pytree.SUPPORTED_NODES:
        return False
    pytree.register_pytree_node(
        cls,
        flatten_cache,
        unflatten_cache,
        serialized_type_name=_class_path(cls),
        flatten_with_keys_fn=_flatten_with_keys,
        to_dumpable_context=lambda c: c,
        from_dumpable_context=lambda c: c,
    )
    try:
        import torch.fx._pytree as fx_pytree

        fx_pytree.register_pytree_flatten_spec(cls, lambda cache, spec: flatten_cache(cache)[0])
    except Exception:  # pragma: no cover - older torch
        pass
    return True


def register_cache_pytrees() -> list[type]:
    """Register every known Cache subclass; idempotent. Returns the classes newly registered.

    The classes (and their layer classes) are also allowed for ``torch.load(weights_only=True)``:
    a saved program's example inputs hold the cache, and torch.export.load reads them that way.
    """
    new = [cls for cls in cache_classes() if register_cache_pytree(cls)]
    _allow_unpickling()  # every call: output classes of models imported since the last one
    return new


def _allow_unpickling() -> None:
    """Cache and layer classes, and the ModelOutput classes an encoder's output travels in (a seq2seq
    decode step's ``encoder_outputs``): plain containers of tensors, safe for weights-only loads."""
    import transformers.cache_utils as cache_utils
    import transformers.modeling_outputs  # noqa: F401  (defines the output classes)
    from transformers.utils import ModelOutput

    # Every class cache_utils defines: layer kinds such as LinearAttentionLayer (Mamba) are not all
    # CacheLayerMixin subclasses.
    defined = [v for v in vars(cache_utils).values() if isinstance(v, type) and v.__module__ == cache_utils.__name__]
    torch.serialization.add_safe_globals(
        [*cache_classes(), *_subclasses(cache_utils.CacheLayerMixin), *defined, *_subclasses(ModelOutput)]
    )


def is_cache(value: Any) -> bool:
    try:
        from transformers.cache_utils import Cache
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, Cache)


def cache_tensors(cache: Any) -> list[torch.Tensor]:
    """The cache's tensors in pytree order (the order the exported graph sees them)."""
    return flatten_cache(cache)[0]


def named_cache_tensors(cache: Any, prefix: str | None = None) -> dict[str, torch.Tensor]:
    """{'past_key_values.layers.0.keys': tensor, ...} in pytree order: stable names for outputs and reports."""
    if prefix is None:
        from .patching.renames import CACHE_ARGUMENT

        prefix = CACHE_ARGUMENT.current()
    tensors: list[torch.Tensor] = []
    names: list[str] = []
    _encode_object(cache, tensors, prefix, names)
    return dict(zip(names, tensors))


def clone_cache(cache: Any) -> Any:
    """A deep copy whose tensors are fresh and row-major: tracing must never touch the caller's cache.

    A sliding-window layer keeps its last tokens as a slice of a longer tensor ([1, 1, 5, 16] with strides
    (96, 96, 16, 1)). torch.export gives such a stride a symbol of its own that the program's range constraints do
    not list, and ``torch.export.load`` then refused the saved program ("vr must not be None for symbol s58";
    gemma3 with one key/value head). Traced on row-major copies (same values), the strides follow the sizes."""
    copied = copy.deepcopy(cache)
    tensors, context = flatten_cache(copied)
    if all(_row_major(t) for t in tensors):
        return copied
    return unflatten_cache([t.clone(memory_format=torch.contiguous_format) for t in tensors], context)


def _row_major(tensor: torch.Tensor) -> bool:
    """Whether the strides are the ones a fresh tensor of this shape has (size-1 axes included)."""
    if tensor.layout != torch.strided:
        return True
    expected, step = [], 1
    for size in reversed(tensor.shape):
        expected.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(expected)) == tuple(tensor.stride())


def reset_cache(cache: Any) -> Any:
    """Empty a cache in place (zeros and counters), keeping its allocation; returns it."""
    if hasattr(cache, "reset"):
        cache.reset()
    return cache

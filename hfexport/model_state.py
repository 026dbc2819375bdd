"""What an export may touch on the caller's model, and how to put it all back.

An export must leave the model exactly as it found it, also when it fails:
parameters and buffers (same objects, same values), config, forward, attention
implementation, the train/eval flag of every submodule. ``preserved(model)``
snapshots all of that cheaply (tensor version counters, not copies, except
buffers, which are small and which some models rewrite during a forward) and
restores it on exit. ``diff_model_state`` says what changed, for tests and the
conformance hygiene checks.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

# Non-cache attributes some models fill during a forward (e.g. rotary tables cached on
# first use). They are cleared for the trace so eager state cannot leak into the graph,
# and FakeTensors the trace planted cannot leak back into eager runs.
STATEFUL_ATTRIBUTES: list[str] = [
    "cached_rotary_positional_embedding",  # wav2vec2_bert, seamless_m4t, clvp
    "cached_sequence_length",
]

_MISSING = object()
# nn.Module's own bookkeeping in a module's ``__dict__``: the tensors and children in it are snapshotted
# one by one (``parameters``, ``buffers``), the flag and the forward on their own.
_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "training", "forward"})
# A module's hook tables (``_forward_hooks``, ``_forward_pre_hooks_with_kwargs``...): the same dict objects before
# and after, so their entries are what is compared and put back.
_HOOK_TABLE_SUFFIXES = ("_hooks", "_hooks_with_kwargs", "_hooks_always_called")


def _is_hook_table(key: str, value: Any) -> bool:
    return isinstance(value, dict) and key.endswith(_HOOK_TABLE_SUFFIXES)


def _own_attributes(m: torch.nn.Module) -> dict[str, Any]:
    """A module's own attributes less nn.Module's bookkeeping; hook tables as copies of their entries."""
    return {k: (dict(v) if _is_hook_table(k, v) else v) for k, v in vars(m).items() if k not in _MODULE_INTERNALS}


def _plain_attributes(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Every module's own attributes and hooks: a forward may set an attribute (Qwen2-VL keeps ``rope_deltas``
    between calls), a post-dispatch trace leaves what it set, and transformers installs its output-capturing hooks
    on a first forward with a flag that says so (the flag must not go without the hooks, nor the hooks without it).
    """
    return {name: _own_attributes(m) for name, m in model.named_modules(remove_duplicate=False)}


def _same(a: Any, b: Any, key: str) -> bool:
    """One attribute unchanged: the same object, or for a hook table the same entries."""
    if _is_hook_table(key, a) and isinstance(b, dict):
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    return a is b


@dataclass
class ModelSnapshot:
    instance_forward: Any
    training: dict[str, bool]
    parameters: dict[str, tuple[int, int]]  # name -> (id, version)
    buffers: dict[str, tuple[torch.Tensor, torch.Tensor, int]]  # name -> (object, clone, version)
    config: dict[str, Any] | None
    attn_implementation: Any
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # module name -> its own attributes
    extra: dict[str, Any] = field(default_factory=dict)


def _config_state(model: Any) -> dict[str, Any] | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    try:
        return copy.deepcopy(config.to_dict())
    except Exception:
        return copy.deepcopy(dict(vars(config)))


def snapshot_model(model: torch.nn.Module) -> ModelSnapshot:
    config = getattr(model, "config", None)
    return ModelSnapshot(
        instance_forward=model.__dict__.get("forward", _MISSING),
        training={name: m.training for name, m in model.named_modules()},
        parameters={n: (id(p), p._version) for n, p in model.named_parameters(remove_duplicate=False)},
        buffers={n: (b, b.detach().clone(), b._version) for n, b in model.named_buffers(remove_duplicate=False)},
        config=_config_state(model),
        attn_implementation=getattr(config, "_attn_implementation", None),
        attributes=_plain_attributes(model),
    )


def diff_model_state(model: torch.nn.Module, snap: ModelSnapshot) -> list[str]:
    """Human-readable list of what differs from the snapshot; empty when nothing does."""
    diffs: list[str] = []
    if model.__dict__.get("forward", _MISSING) is not snap.instance_forward:
        diffs.append("model.forward was replaced")
    for name, m in model.named_modules():
        if snap.training.get(name, m.training) != m.training:
            diffs.append(f"{name or 'model'}.training changed to {m.training}")
    params = dict(model.named_parameters(remove_duplicate=False))
    if set(params) != set(snap.parameters):
        diffs.append(f"parameter names changed: {sorted(set(params) ^ set(snap.parameters))[:5]}")
    for n, p in params.items():
        if n in snap.parameters and (id(p), p._version) != snap.parameters[n]:
            diffs.append(f"parameter {n} was replaced or modified in place")
    buffers = dict(model.named_buffers(remove_duplicate=False))
    if set(buffers) != set(snap.buffers):
        diffs.append(f"buffer names changed: {sorted(set(buffers) ^ set(snap.buffers))[:5]}")
    for n, b in buffers.items():
        if n not in snap.buffers:
            continue
        obj, clone, _ = snap.buffers[n]
        if b is not obj:
            diffs.append(f"buffer {n} was replaced")
        elif b.shape != clone.shape or not torch.equal(b, clone):
            diffs.append(f"buffer {n} values changed")
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != snap.attn_implementation:
        diffs.append(f"attention implementation changed to {getattr(config, '_attn_implementation', None)!r}")
    if snap.config is not None and _config_state(model) != snap.config:
        diffs.append("model.config changed")
    for mod_name, m in model.named_modules(remove_duplicate=False):
        before = snap.attributes.get(mod_name)
        if before is None:
            continue
        now = _own_attributes(m)
        for key in sorted(set(now) ^ set(before)):
            diffs.append(f"{mod_name or 'model'}.{key} was {'added' if key in now else 'removed'}")
        diffs += [f"{mod_name or 'model'}.{k} changed" for k in now if k in before and not _same(now[k], before[k], k)]
    for name in STATEFUL_ATTRIBUTES:
        for mod_name, m in model.named_modules():
            value = m.__dict__.get(name)
            if isinstance(value, torch.Tensor) and isinstance(value, torch._subclasses.FakeTensor):
                diffs.append(f"{mod_name}.{name} holds a FakeTensor from tracing")
    return diffs


def restore_model(model: torch.nn.Module, snap: ModelSnapshot) -> None:
    if snap.instance_forward is _MISSING:
        model.__dict__.pop("forward", None)
    else:
        model.__dict__["forward"] = snap.instance_forward
    for name, m in model.named_modules():
        if name in snap.training:
            m.training = snap.training[name]
    modules = dict(model.named_modules(remove_duplicate=False))
    for name, attributes in snap.attributes.items():
        m = modules.get(name)
        if m is None:
            continue
        for key in [k for k in vars(m) if k not in _MODULE_INTERNALS and k not in attributes]:
            del m.__dict__[key]
        for key, value in attributes.items():
            current = m.__dict__.get(key, _MISSING)
            if _is_hook_table(key, current):
                if not _same(current, value, key):
                    current.clear()
                    current.update(value)
            elif current is not value:
                m.__dict__[key] = value
    # Put back any buffer a forward replaced or rewrote.
    for full_name, (obj, clone, version) in snap.buffers.items():
        owner_name, _, leaf = full_name.rpartition(".")
        owner = model.get_submodule(owner_name) if owner_name else model
        current = owner._buffers.get(leaf)
        if current is not obj:
            owner._buffers[leaf] = obj
        if obj._version != version and (obj.shape != clone.shape or not torch.equal(obj, clone)):
            with torch.no_grad():
                obj.copy_(clone)
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) != snap.attn_implementation:
        try:
            config._attn_implementation = snap.attn_implementation
        except Exception:  # pragma: no cover
            pass


@contextlib.contextmanager
def preserved(model: torch.nn.Module) -> Iterator[ModelSnapshot]:
    """Snapshot on entry, restore on exit (errors included)."""
    snap = snapshot_model(model)
    try:
        yield snap
    finally:
        restore_model(model, snap)


@contextlib.contextmanager
def stateful_attributes_cleared(model: torch.nn.Module) -> Iterator[None]:
    """Null every STATEFUL_ATTRIBUTES entry for the trace; restore the originals after."""
    saved = []
    for m in model.modules():
        for name in STATEFUL_ATTRIBUTES:
            value = m.__dict__.get(name, _MISSING)
            if value is not _MISSING:
                saved.append((m, name, value))
                setattr(m, name, None)
    try:
        yield
    finally:
        for m, name, value in saved:
            setattr(m, name, value)

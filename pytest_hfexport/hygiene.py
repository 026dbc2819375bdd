"""What an export may not leave behind: a snapshot of the caller's world, taken by value, and its diff.

An export patches classes, swaps forwards, installs hooks, toggles grad mode and tracing
flags; it must put all of it back, whether it succeeds or fails at any stage. The snapshot
covers, by value (not by live reference, so a dict mutated in place is seen):

* the model: every submodule's class, instance attributes (an instance ``forward``
  included), hooks of every kind, train/eval flag, parameters and buffers (identity, dtype, device, requires_grad and
  values), the config and generation config;
* the caller's inputs: the mapping's keys, the identity, dtype and values of every entry;
* process state (``pytest_hfexport.process_state``): torch's global switches (grad mode, default
  dtype, threads, matmul precision, backend flags...), the random generators, environment variables,
  warnings filters, loggers, the recursion limit, and the tracing configs torch.export and dynamo read;
* every attribute of the transformers and torch modules (and of their classes) an export could
  patch, with the contents of module- and class-level registries (dicts, lists).

The judge owns this code: it knows nothing of which patches an implementation installs.
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import process_state

# Module prefixes whose attributes (and classes' attributes) are snapshotted.
PATCHABLE_MODULES = (
    "transformers",
    "torch.nn",
    "torch.export",
    "torch.onnx",
    "torch._decomp",
    "torch.fx",
    "torch._export",
    "executorch.exir",
    "onnxscript",
    "onnx_ir",
)
PATCHABLE_EXACT = ("torch", "torch.functional", "torch.utils._pytree")
# Attribute names that are bookkeeping, not behaviour (caches filled on use, warning registries).
BOOKKEEPING = (
    "__warningregistry__",
    "_warned",
    "_LOGGED",
    "__cached__",
    "_lazy",
    "__spec__",
    "__loader__",
    "_objects",
    "_modules",
    "_class_to_module",
    "_object_missing_backend",
)
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks",
)


@dataclass
class Snapshot:
    model: dict[str, Any]
    inputs: dict[str, Any]
    torch_state: dict[str, Any]
    attributes: dict[tuple[str, str], Any]
    loggers: dict[str, Any]
    warnings_filters: tuple[str, ...]


class Entries(dict):
    """A registry's entries by value (key -> identity of the value): an entry changed or removed is a patch left
    behind; an entry added is not reported (registries and caches grow as code runs)."""


def _plain(obj: Any, depth: int = 0) -> bool:
    """Plain data (numbers, strings, and lists, tuples and dicts of them): compared by value."""
    if isinstance(obj, (bool, int, float, str, bytes, type(None))):
        return True
    if depth < 3 and type(obj) in (list, tuple) and len(obj) < 100:
        return all(_plain(v, depth + 1) for v in obj)
    if depth < 3 and type(obj) is dict and len(obj) < 100:
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in obj.items())
    return False


def _value(obj: Any) -> Any:
    """A comparable stand-in for an attribute's value: plain data by value, the entries of a registry (dict or
    list) by the identity of each value, anything else by identity."""
    if _plain(obj):
        return ("=", repr(obj))
    if isinstance(obj, dict) and dict.__len__(obj) < 10_000:  # the stored items: no lazy mapping is triggered
        return Entries((repr(k), repr(v) if _plain(v) else id(v)) for k, v in dict.items(obj))
    if type(obj) is list and len(obj) < 10_000:
        return Entries((str(i), repr(v) if _plain(v) else id(v)) for i, v in enumerate(obj))
    return ("id", id(obj))


def _behaviour(module_name: str, value: Any) -> bool:
    """Whether an attribute is behaviour an export could patch. In torch and the backend packages only
    functions and classes count (their other module state is the runtime's own bookkeeping)."""
    if module_name.startswith("transformers"):
        return True
    return callable(value)


def _watched_modules() -> list[tuple[str, types.ModuleType]]:
    out = []
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        if name in PATCHABLE_EXACT or any(name == p or name.startswith(p + ".") for p in PATCHABLE_MODULES):
            out.append((name, module))
    return out


def _attributes() -> dict[tuple[str, str], Any]:
    found: dict[tuple[str, str], Any] = {}
    seen_classes: set[int] = set()
    for name, module in _watched_modules():
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if attr in BOOKKEEPING or attr.startswith("__") or not _behaviour(name, value):
                continue
            found[(name, attr)] = _value(value)
            if isinstance(value, type) and id(value) not in seen_classes and getattr(value, "__module__", "") == name:
                seen_classes.add(id(value))
                for cattr, cvalue in list(vars(value).items()):
                    if (
                        cattr in BOOKKEEPING
                        or (cattr.startswith("__") and cattr not in ("__init__", "__call__"))
                        or not _behaviour(name, cvalue)
                    ):
                        continue
                    found[(f"{name}.{value.__qualname__}", cattr)] = _value(cvalue)
    return found


def _torch_state() -> dict[str, Any]:
    import torch.nn.modules.module as module_mod

    state: dict[str, Any] = {
        **process_state.torch_switches(),
        **process_state.random_state(),
        **process_state.interpreter_state(),
    }
    for hooks in GLOBAL_HOOKS:
        value = getattr(module_mod, hooks, None)
        if value is not None:
            state[f"torch.nn global {hooks}"] = tuple(value.keys()) if hasattr(value, "keys") else len(value)
    for config_name in (
        "torch._dynamo.config",
        "torch.fx.experimental._config",
        "torch._functorch.config",
        "torch._export.config",
    ):
        config = sys.modules.get(config_name)
        if config is not None and hasattr(config, "get_config_copy"):
            for key, value in config.get_config_copy().items():
                state[f"{config_name}.{key}"] = repr(value)
    return state


def _model_state(model: Any) -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        where = name or "model"
        state[f"{where} class"] = id(type(module))
        state[f"{where} training"] = module.training
        for key, value in vars(module).items():
            if not key.startswith("_") and not isinstance(value, torch.Tensor):
                state[f"{where}.{key}"] = _value(value)
        state[f"{where} forward"] = id(module.__dict__.get("forward"))
        for hooks in HOOK_DICTS:
            value = getattr(module, hooks, None)
            if value:
                state[f"{where} {hooks}"] = tuple((k, id(v)) for k, v in value.items())
        state[f"{where} children"] = tuple(module._modules)
        state[f"{where} non-persistent buffers"] = tuple(sorted(module._non_persistent_buffers_set))
    for kind, named in (
        ("parameter", model.named_parameters(remove_duplicate=False)),
        ("buffer", model.named_buffers(remove_duplicate=False)),
    ):
        for name, tensor in named:
            state[f"{kind} {name}"] = (id(tensor), tensor.detach().clone())
            state[f"{kind} {name} device, requires_grad"] = (str(tensor.device), tensor.requires_grad)
    config = getattr(model, "config", None)
    if config is not None:
        state["config"] = copy.deepcopy(config.to_dict())
        configs = [("config", config)] + [
            (f"config.{k}", getattr(config, k, None)) for k in (getattr(config, "sub_configs", None) or {})
        ]
        for path, sub in configs:
            state[f"{path}._attn_implementation"] = getattr(sub, "_attn_implementation", None)
            for key, value in vars(sub).items() if sub is not None else ():
                if key.startswith("_") and not key.startswith("__") and _plain(value):  # to_dict drops these
                    state[f"{path}.{key}"] = repr(value)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        state["generation_config"] = copy.deepcopy(generation.to_dict())
    return state


def _inputs_state(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    from .naming import flat_named

    state: dict[str, Any] = {"mapping": id(inputs), "keys": tuple(inputs.keys())}
    for key, value in inputs.items():
        state[f"{key} identity"] = id(value)
        for name, tensor in flat_named(value, key).items():
            state[f"{name} identity"] = id(tensor)
            state[f"{name} dtype"] = tensor.dtype
            state[f"{name} value"] = tensor.detach().clone() if isinstance(tensor, torch.Tensor) else tensor
    return state


# A backend's own once-per-process set-up that replaces attributes the snapshot watches, run before a snapshot
# when its module is loaded, so the first export in a process is judged like any other (and an
# implementation's own change to the same attributes is still seen): (module, function, why).
UPSTREAM_ONE_TIME_SETUP = (
    (
        "executorch.exir._serialize._flatbuffer_program",
        "_install_fast_packers",
        "ExecuTorch installs faster flatbuffer packers on BufferT/BackendDelegateInlineDataT.Pack on its first "
        "serialisation (lru_cache'd)",
    ),
)


def _run_upstream_one_time_setup() -> None:
    for module_name, function, _why in UPSTREAM_ONE_TIME_SETUP:
        setup = getattr(sys.modules.get(module_name), function, None)
        if callable(setup):
            setup()


def snapshot(model: Any, inputs: Mapping[str, Any]) -> Snapshot:
    """Everything an export must leave as it found it (see the module doc)."""
    _run_upstream_one_time_setup()
    return Snapshot(
        _model_state(model),
        _inputs_state(inputs),
        _torch_state(),
        _attributes(),
        process_state.loggers(),
        process_state.warnings_filters(),
    )


def _differs(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], torch.Tensor):
        return not (isinstance(b, tuple) and a[0] == b[0] and not _differs(a[1], b[1]))
    if isinstance(a, torch.Tensor):
        return not (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))
    return a != b


def _diff(kind: str, before: Mapping[Any, Any], after: Mapping[Any, Any], report_added: bool = True) -> list[str]:
    out = []
    for key, value in before.items():
        if key not in after:
            out.append(f"{kind}: {key} is gone")
        elif isinstance(value, Entries) and isinstance(after[key], Entries):
            out += [
                f"{kind}: {key}[{entry}] {'is gone' if entry not in after[key] else 'changed'}"
                for entry, ident in value.items()
                if after[key].get(entry) != ident
            ]
        elif _differs(value, after[key]):
            out.append(f"{kind}: {key} changed")
    if report_added:
        out += [f"{kind}: {key} was added" for key in after if key not in before]
    return out


def diff(before: Snapshot, model: Any, inputs: Mapping[str, Any]) -> list[str]:
    """What differs now from ``before``: one line per difference, empty when nothing does."""
    now = snapshot(model, inputs)
    problems = _diff("model", before.model, now.model)
    problems += _diff("inputs", before.inputs, now.inputs)
    problems += _diff("torch", before.torch_state, now.torch_state)
    # Attributes that appear later (lazily imported modules, attributes cached on first access) are not
    # patches left behind; a changed or vanished one is.
    problems += _diff("patched attribute", before.attributes, now.attributes, report_added=False)
    # Loggers and filters a first import creates are the imported module's own; changed ones are the export's.
    problems += _diff("logging", before.loggers, now.loggers, report_added=False)
    problems += process_state.filter_changes(before.warnings_filters, now.warnings_filters)
    return problems

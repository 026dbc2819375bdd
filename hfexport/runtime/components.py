"""Eager ``generate()`` driven by exported components: the end-to-end check of a component split.

``export_for_generation`` cuts a model into the modules that ``generate()`` calls
(encoders, projector, language model, LM head, the model's prefill and decode
steps). The surest proof that the cut is right, for every family at once, is to
run the model's own ``generate()`` with each of those modules' ``forward``
replaced by its exported artifact: the glue that stays in Python (input
preparation, embedding merges, cache bookkeeping, greedy choice) is the model's
own, so any token that differs from plain eager ``generate()`` comes from an
exported graph.

Each replaced call gets its tensor-carrying arguments (flags were baked in at
export) flattened by the artifact's runner; the flat named outputs are put back
into the structure the eager submodule returns (a ``ModelOutput`` holding a
cache), read once from an eager call on the captured arguments.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..decode_calls import explicit_mask, one_static_mask
from ..generation import _bind, _clean
from ..graph_inputs import tensor_inputs
from ..outputs import spec_leaf_names
from ..patching.renames import CACHE_ARGUMENT
from .base import Runner

logger = logging.getLogger(__name__)

# Components that stand for the top-level model's forward: which call each one serves.
TOP_LEVEL = {"prefill": "first", "decode": "later"}


class _Rebuilder:
    """Flat named outputs -> the structure the eager module returns (one eager call gives the spec)."""

    def __init__(self, module: torch.nn.Module, kwargs: Mapping[str, Any]) -> None:
        with torch.no_grad():
            template = module(**copy.deepcopy(dict(kwargs)))
        leaves, self.spec = pytree.tree_flatten(template)
        self.names = spec_leaf_names(self.spec)
        self.is_tensor = [isinstance(leaf, torch.Tensor) for leaf in leaves]
        self.leaves = leaves

    def __call__(self, flat: Mapping[str, torch.Tensor], component: str) -> Any:
        flat = {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}  # ExecuTorch: None for None outputs
        missing = [n for n, t in zip(self.names, self.is_tensor) if t and n not in flat]
        if missing:
            raise KeyError(
                f"component {component!r}: the artifact returned no {missing[:4]} "
                f"(it returned {list(flat)[:8]}); was it exported from this model?"
            )
        values = [flat[n] if t else leaf for n, t, leaf in zip(self.names, self.is_tensor, self.leaves)]
        out = pytree.tree_unflatten(values, self.spec)
        _set_int_state(out, flat)
        return out


def _set_int_state(out: Any, flat: Mapping[str, torch.Tensor]) -> None:
    """Python-int cache counters the graph returned as outputs (e.g. a sliding layer's fill count)."""
    for name, value in flat.items():
        if value.dim() != 0 or "." not in name:
            continue
        *path, attr = name.split(".")
        obj: Any = out
        try:
            for part in path:
                obj = (
                    obj[int(part)]
                    if isinstance(obj, (list, tuple))
                    else (obj[part] if isinstance(obj, Mapping) else getattr(obj, part))
                )
        except (AttributeError, KeyError, IndexError, ValueError, TypeError):
            continue
        if hasattr(obj, "__dict__"):
            if isinstance(getattr(obj, attr, None), int) and not isinstance(getattr(obj, attr), bool):
                setattr(obj, attr, int(value))


def _cache_layers(cache: Any) -> list[Any]:
    """The layers of a transformers cache (the self-attention half of an encoder-decoder cache)."""
    cache = getattr(cache, "self_attention_cache", cache)
    return list(getattr(cache, "layers", None) or [])


def carry_token_counters(call: Mapping[str, Any], out: Any) -> None:
    """Carry a layer's Python-int token counter (a sliding-window layer's ``cumulative_length``) forward.

    A graph cannot return a Python int: the counter is part of the output cache's structure, fixed at the
    sample's value, so a rebuilt cache would report the sample's length from ``get_seq_length()`` at every
    step (and generate() would then build a mask shorter than the cache). The caller's count plus the tokens
    of this call is what eager's ``update`` leaves there."""
    name = CACHE_ARGUMENT.key_in(call) or CACHE_ARGUMENT.current()
    before = call.get(name)
    after = out.get(name) if isinstance(out, Mapping) else getattr(out, name, None)
    ids = call.get("input_ids")
    ids = ids if isinstance(ids, torch.Tensor) else call.get("inputs_embeds")
    if after is None or after is before or not isinstance(ids, torch.Tensor) or ids.dim() < 2:
        return
    old = _cache_layers(before)
    for index, layer in enumerate(_cache_layers(after)):
        if not isinstance(getattr(layer, "cumulative_length", None), int):
            continue
        seen = getattr(old[index], "cumulative_length", 0) if index < len(old) else 0
        layer.cumulative_length = int(seen) + int(ids.shape[1])


class ExportedGenerate:
    """``generate()`` of ``model`` with the components' forwards served by their artifacts.

    ``components`` is what ``decompose_for_generation`` returned (the captured kwargs give
    each output's structure); ``runners`` maps component names to loaded artifacts
    (``hfexport.runtime.load``). Components without a runner stay eager.
    """

    def __init__(
        self,
        model: Any,
        components: Mapping[str, tuple[torch.nn.Module, dict[str, Any]]],
        runners: Mapping[str, Runner],
    ) -> None:
        unknown = sorted(set(runners) - set(components))
        if unknown:
            raise ValueError(f"runners for unknown components {unknown}; the components are {sorted(components)}")
        self.model = model
        self.components = components
        self.runners = dict(runners)
        self.rebuilders = {name: _Rebuilder(components[name][0], components[name][1]) for name in self.runners}
        self.calls: dict[str, int] = {name: 0 for name in self.runners}

    def _serve(self, name: str, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        call = _clean(_bind(module, args, kwargs))
        # generate() drops an all-ones mask, and gives a static cache's call its masks per layer type: an artifact that
        # takes one mask was exported with the explicit one (decompose_for_generation)
        takes_one_mask = "attention_mask" in self.runners[name].input_names
        call = explicit_mask(call, takes_one_mask)
        inputs = tensor_inputs(one_static_mask(call) if takes_one_mask else call)
        self.calls[name] += 1
        out = self.rebuilders[name](self.runners[name](inputs), name)
        carry_token_counters(call, out)
        return out

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Replace the forwards for the duration; the originals come back on any exit."""
        by_module: dict[int, tuple[torch.nn.Module, dict[str, str]]] = {}
        for name in self.runners:
            module = self.components[name][0]
            by_module.setdefault(id(module), (module, {}))[1][name] = TOP_LEVEL.get(name, "every")
        with contextlib.ExitStack() as restore:
            for module, roles in by_module.values():
                restore.callback(_put_back_forward, module, module.__dict__.get("forward", _MISSING))
                module.forward = self._dispatcher(module, roles)
            yield

    def _dispatcher(self, module: torch.nn.Module, roles: dict[str, str]) -> Any:
        eager = type(module).forward.__get__(module)
        state = {"calls": 0}
        by_role = {role: name for name, role in roles.items()}

        def forward(*args: Any, **kwargs: Any) -> Any:
            first = state["calls"] == 0
            state["calls"] += 1
            name = by_role.get("every") or (by_role.get("first") if first else by_role.get("later"))
            if name is None:  # e.g. a multimodal prefill: the model's own forward, its parts exported
                return eager(*args, **kwargs)
            return self._serve(name, module, args, kwargs)

        # generate() reads forward's signature to decide what to pass (position_ids, masks...)
        functools.update_wrapper(forward, eager)
        forward.__signature__ = inspect.signature(eager)  # type: ignore[attr-defined]
        return forward

    def generate(
        self, inputs: Mapping[str, Any], max_new_tokens: int = 16, generation_config: Any = None
    ) -> torch.Tensor:
        """Greedy tokens (new ones only) from ``generate()`` with every runner installed."""
        from ..generation import _generation_config
        from ..patching import apply_patches

        config = _generation_config(self.model, generation_config, max_new_tokens)
        self.calls = {name: 0 for name in self.runners}
        # generate() builds its static cache here: with the "generation" patches, as while the components were
        # captured, its sliding layers keep every slot, the layout the static graphs were traced with
        with torch.no_grad(), self.installed(), apply_patches("generation"):
            out = self.model.generate(**copy.deepcopy(dict(inputs)), generation_config=config)
        unused = [n for n, c in self.calls.items() if c == 0]
        if unused:
            raise RuntimeError(
                f"generate() never called the exported {unused}; the component split does not match this generation run"
            )
        return _new_tokens(out, max_new_tokens)


_MISSING = object()


def _put_back_forward(module: torch.nn.Module, original: Any) -> None:
    """Undo one served forward: the instance attribute the module had, or none (its class's forward again)."""
    if original is _MISSING:
        module.__dict__.pop("forward", None)
    else:
        module.forward = original


def _new_tokens(out: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` generated tokens: the last columns, since min_new_tokens == max_new_tokens. Not counted
    from the prompt: an encoder-decoder's generate() puts the decoder start token in front of decoder ids
    that lack it, so the returned prefix is not always the prompt given."""
    return out[:, out.shape[1] - count :]


def eager_greedy_tokens(
    model: Any, inputs: Mapping[str, Any], max_new_tokens: int = 16, generation_config: Any = None
) -> torch.Tensor:
    """The reference: plain eager ``generate()`` with the same greedy settings."""
    from ..generation import _generation_config

    config = _generation_config(model, generation_config, max_new_tokens)
    with torch.no_grad():
        out = model.generate(**copy.deepcopy(dict(inputs)), generation_config=config)
    return _new_tokens(out, max_new_tokens)

"""The model's own ``generate()`` with each generation component served by its artifact: the judge's
end-to-end check that a component split is right, for every family at once.

While ``served`` is active, the forward of each component's live submodule (the model
itself for ``prefill``, its first call, and ``decode``, its later calls) is replaced: the
call's tensor arguments go to the artifact's runner, and the artifact's outputs are put into
the structure the eager submodule returns (read from an eager call on a copy of the same
arguments, so every tensor the caller sees comes from the artifact; a name the artifact does
not return is an error). Everything else ``generate()`` does stays the model's own Python,
so a token that differs from plain eager ``generate()`` comes from an artifact.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .naming import flat_named, replace_named
from .reference import (
    RETURN_SHAPING,
    TOP_LEVEL,
    bind_call,
    component_modules,
    explicit_mask,
    generation_config,
    graph_kwargs,
    takes_attention_mask,
)
from .reference import new_tokens as _new_tokens

_MISSING = object()
# Of the return-shaping arguments, those whose outputs the caller goes on to read: llava's generate() asks
# its vision tower for hidden states and indexes them, so the template must hold them for the artifact's.
KEPT = ("output_hidden_states",)


class ServingError(AssertionError):
    """An artifact could not stand in for its component inside generate()."""


@contextlib.contextmanager
def served(model: Any, runners: Mapping[str, Callable[..., Any]], masked: bool = False) -> Iterator[dict[str, int]]:
    """Replace the components' forwards by their artifacts for the block; yields the call count per component.
    ``masked``: the caller passed a padding mask, so the model's calls always get one (see
    ``reference.explicit_mask``). The original forwards come back on any exit."""
    modules = component_modules(model)
    unknown = sorted(set(runners) - set(modules))
    if unknown:
        raise ServingError(
            f"components {unknown} name no part of {type(model).__name__} that generate() calls "
            f"(known: {sorted(modules)})"
        )
    calls = {name: 0 for name in runners}
    roles: dict[int, tuple[Any, dict[str, str]]] = {}
    for name in runners:
        module = modules[name]
        roles.setdefault(id(module), (module, {}))[1][name] = name
    saved = []
    # While a dispatcher runs eager for its output template, the parts inside run eager too: the
    # template is eager's, and a served part must not see calls its component never makes.
    eager_only = {"on": False}
    try:
        for module, names in roles.values():
            saved.append((module, module.__dict__.get("forward", _MISSING)))
            module.forward = _dispatcher(module, names, runners, calls, masked, eager_only)
        yield calls
    finally:
        for module, original in saved:
            if original is _MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.forward = original


def _dispatcher(
    module: Any,
    names: Mapping[str, str],
    runners: Mapping[str, Callable[..., Any]],
    calls: dict[str, int],
    masked: bool,
    eager_only: dict[str, bool],
) -> Callable[..., Any]:
    eager = type(module).forward.__get__(module)
    state = {"calls": 0}

    def forward(*args: Any, **kwargs: Any) -> Any:
        if eager_only["on"]:
            return eager(*args, **kwargs)
        index = state["calls"]
        state["calls"] += 1
        if set(names) <= set(TOP_LEVEL):
            name = "prefill" if index == 0 and "prefill" in names else "decode" if index > 0 else None
            name = name if name in names else None
        else:
            name = next(iter(names))
        if name is None:  # e.g. a multimodal prefill: the model's own forward, its parts served
            return eager(*args, **kwargs)
        call = bind_call(module, args, kwargs)
        if masked and takes_attention_mask(module):
            explicit_mask(call)
        calls[name] += 1
        got = flat_named(runners[name](**copy.deepcopy(graph_kwargs(call))))
        eager_only["on"] = True
        try:
            template = eager(**{k: v for k, v in copy.deepcopy(call).items() if k in KEPT or k not in RETURN_SHAPING})
        finally:
            eager_only["on"] = False
        expected = flat_named(template)
        wrong = [
            f"{n} {tuple(got[n].shape)} (eager {tuple(t.shape)})"
            for n, t in expected.items()
            if n in got and tuple(got[n].shape) != tuple(t.shape)
        ]
        if wrong:
            raise ServingError(
                f"component {name!r}: the artifact's outputs have other shapes than eager's: {wrong[:4]}"
            )
        result, missing = replace_named(template, got)
        if missing:
            raise ServingError(
                f"component {name!r}: the artifact returned no {missing[:4]} (it returned {sorted(got)[:8]})"
            )
        return result

    functools.update_wrapper(forward, eager)
    # generate() reads the forward's signature to decide what to pass.
    forward.__signature__ = inspect.signature(eager)  # type: ignore[attr-defined]
    return forward


def served_tokens(
    model: Any,
    runners: Mapping[str, Callable[..., Any]],
    inputs: Mapping[str, Any],
    tokens: int,
    generation: Any = None,
) -> Any:
    """Greedy new tokens of ``model.generate(**inputs)`` with every runner serving its component; every
    component must have been called."""
    import torch

    config = generation_config(model, tokens, generation)
    masked = isinstance(inputs.get("attention_mask"), torch.Tensor)
    with torch.no_grad(), served(model, runners, masked) as calls:
        sequences = model.generate(**copy.deepcopy(dict(inputs)), generation_config=config)
    idle = sorted(name for name, count in calls.items() if count == 0)
    if idle:
        raise ServingError(f"generate() never called the components {idle}: the split does not match this run")
    return _new_tokens(sequences, tokens)

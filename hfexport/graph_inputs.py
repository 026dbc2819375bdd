"""The graph inputs of a trace: which sample inputs become graph inputs and in which order, and the flat
forward signature that makes exactly those the model's arguments while the others are bound as constants.

Tensors, caches and containers that hold them are graph inputs; flags such as ``use_cache=False`` are constants
baked into the graph. Caches are cloned, so tracing never writes into the caller's.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from . import caches


def carries_tensors(value: Any) -> bool:
    """True for tensors, caches and containers that hold them: those become graph inputs."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, Mapping):
        return any(carries_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(carries_tensors(v) for v in value)
    if caches.is_cache(value):
        return True
    return bool(getattr(value, "__dict__", None)) and any(carries_tensors(v) for v in vars(value).values())


def tensor_inputs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments that are graph inputs (tensors, caches, containers of them); flags and other
    constants were baked into the graph at export, so a call of the exported program drops them."""
    return {k: v for k, v in kwargs.items() if carries_tensors(v)}


def split_inputs(sample_inputs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(graph inputs, constants). Caches are cloned so tracing never mutates the caller's."""
    if not isinstance(sample_inputs, Mapping):
        raise TypeError(
            f"sample_inputs must be a dict of named inputs (e.g. a tokenizer's BatchEncoding), "
            f"got {type(sample_inputs).__name__}"
        )
    graph, constants = {}, {}
    for name, value in dict(sample_inputs).items():
        if carries_tensors(value):
            graph[name] = caches.clone_cache(value) if caches.is_cache(value) else value
        else:
            constants[name] = value
    if not graph:
        raise ValueError("sample_inputs holds no tensor: pass at least the model's main input (e.g. input_ids)")
    return _in_guide_order(graph), constants


# The positional layout a caller of a backend without input names (an ExecuTorch method) is written against:
# the decode loop's token ids, mask, positions, then the cache; every other input keeps the caller's order after
# them. An encoder-decoder's ``decoder_input_ids`` is one of "the rest": ahead of the mask it would reorder a plain
# export's (input_ids, attention_mask, decoder_input_ids), and ahead of ``input_features`` or ``pixel_values`` a
# speech or vision encoder-decoder's, against the caller's order that a positional caller passes.
# The cache under either of its names (transformers 5.25 renamed it: patching.renames.CACHE_ARGUMENT).
GUIDE_INPUT_ORDER = ("input_ids", "attention_mask", "position_ids", "past_key_values", "cache")


def _in_guide_order(graph: dict[str, Any]) -> dict[str, Any]:
    """``graph`` with the guide's inputs first, in the guide's order (a generate() call passes them in another),
    the others in the caller's order."""
    first = [name for name in GUIDE_INPUT_ORDER if name in graph]
    return {**{name: graph[name] for name in first}, **graph}


@contextlib.contextmanager
def flat_forward(model: torch.nn.Module, graph_inputs: Mapping[str, Any], constants: Mapping[str, Any]):
    """Stage 1: give ``model.forward`` an explicit signature of exactly the graph inputs."""
    original = model.forward

    def forward(**kwargs: Any) -> Any:
        return original(**kwargs, **constants)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in graph_inputs]
    )
    model.forward = forward  # instance attribute; preserved() removes it again
    yield

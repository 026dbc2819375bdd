"""Greedy decode loops over an exported static-cache ``decode`` graph: one loop shape for every backend.

The loop is "the guide's loop" of docs/api.md: start from an empty fixed-length cache, feed the whole
prompt in one call (empty cache -> prefill), then one token per call. Every call
passes ``input_ids``, a causal ``attention_mask`` over the cache slots
([B, 1, q, max_cache_len], bool) and ``position_ids``; where a token lands in the
cache is tracked by the cache itself. Backends differ only in who owns the cache
buffers and how a call binds them (``step``).
"""

from __future__ import annotations

import abc
import copy
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx._pytree as fx_pytree

from .. import caches, speedups
from ..decode_calls import cache_slot_mask
from .dynamo import FlatGraph
from .program_store import load_program
from .reinplace import reinplace_input_updates
from .weight_layout import lay_out_for_one_token


def causal_mask(positions: torch.Tensor, cache_len: int, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """[1, 1, len(positions), cache_len]: slot j is visible to the query at position p iff j <= p
    (additive 0 / finfo.min for a float mask dtype)."""
    return cache_slot_mask(positions, cache_len, dtype=dtype)


@dataclass
class GenerationResult:
    tokens: list[int]
    prefill_s: float
    decode_s: float
    steps: int
    per_step_s: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.steps / self.decode_s if self.decode_s > 0 else float("inf")


class DecodeLoop(abc.ABC):
    backend = ""
    max_cache_len: int
    mask_dtype: torch.dtype = torch.bool

    @abc.abstractmethod
    def reset(self) -> None:
        """Empty the cache (zeros, counters back to 0)."""

    @abc.abstractmethod
    def step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Run the decode graph once; return logits [B, q, vocab]."""

    def cache_storage(self) -> list[torch.Tensor]:
        """The cache tensors every step writes in place (same storage for the whole loop); empty where the
        backend hands the updated cache back as new outputs instead."""
        return []

    @abc.abstractmethod
    def cache_tensors(self) -> dict[str, torch.Tensor]:
        """The cache as the caller holds it after the last step, by flat name (``past_key_values.layers.0.keys``)."""

    @abc.abstractmethod
    def runtime_writes(self) -> dict[str, int]:
        """Per cache tensor, the address the runtime wrote it to in the last step, read from the runtime's own
        output objects (a conformance check compares it with ``cache_tensors()``: equal means in place)."""

    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int) -> GenerationResult:
        if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1:
            raise ValueError(f"prompt_ids must be [1, prompt_len], got {tuple(prompt_ids.shape)}")
        prompt_len = prompt_ids.shape[1]
        if prompt_len + max_new_tokens > self.max_cache_len:
            raise ValueError(
                f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the cache length "
                f"{self.max_cache_len}; export with a larger max_cache_len or pass max_cache_len="
            )
        self.reset()
        start = time.perf_counter()
        positions = torch.arange(prompt_len)
        logits = self.step(prompt_ids, causal_mask(positions, self.max_cache_len, self.mask_dtype), positions[None])
        token = int(logits[0, -1].argmax())
        prefill_s = time.perf_counter() - start
        tokens = [token]
        input_ids = torch.empty((1, 1), dtype=torch.long)
        position_ids = torch.empty((1, 1), dtype=torch.long)
        # The first step's row of the causal mask; each later step makes one more slot visible (its own): a new
        # mask per step cost a small model's loop a quarter of its step.
        mask = causal_mask(torch.tensor([prompt_len]), self.max_cache_len, self.mask_dtype)
        visible = causal_mask(torch.tensor([0]), 1, self.mask_dtype)[0, 0, 0, 0]
        per_step = []
        decode_start = time.perf_counter()
        for position in range(prompt_len, prompt_len + max_new_tokens - 1):
            t0 = time.perf_counter()
            input_ids.fill_(token)
            position_ids.fill_(position)
            mask[0, 0, 0, position] = visible
            logits = self.step(input_ids, mask, position_ids)
            token = int(logits[0, -1].argmax())
            tokens.append(token)
            per_step.append(time.perf_counter() - t0)
        return GenerationResult(tokens, prefill_s, time.perf_counter() - decode_start, len(per_step), per_step)


def _cache_kwarg(template: dict[str, Any]) -> str:
    for name, value in template.items():
        if caches.is_cache(value):
            return name
    raise ValueError(
        "the decode program takes no cache input; export it with a StaticCache "
        "(GenerationConfig(cache_implementation='static'), multi_token_decode=True)"
    )


def max_cache_length(cache: Any) -> int:
    """Slots of the longest layer (every layer of an export_for_generation cache; an eager StaticCache's
    sliding layers hold only their window)."""
    return max(layer.keys.shape[2] for layer in cache.layers if isinstance(getattr(layer, "keys", None), torch.Tensor))


def resize_static_cache(cache: Any, max_cache_len: int) -> Any:
    """A zeroed copy of ``cache`` whose full-length layers hold ``max_cache_len`` slots (the graph's cache axis is
    symbolic); layers holding fewer slots (a window) keep them."""
    out = copy.deepcopy(cache)
    full = max_cache_length(cache)
    for layer in out.layers:
        if isinstance(getattr(layer, "keys", None), torch.Tensor) and layer.keys.shape[2] == full:
            b, h, _, d = layer.keys.shape
            layer.keys = layer.keys.new_zeros((b, h, max_cache_len, d))
            layer.values = layer.values.new_zeros((b, h, max_cache_len, layer.values.shape[-1]))
            layer.max_cache_len = max_cache_len
    return out


class DynamoDecodeLoop(DecodeLoop):
    """torch.export: the StaticCache passed in is updated in place (USER_INPUT_MUTATION), one cache for all steps.

    The first call with a new input signature (shapes and dtypes of ids, mask and positions) goes through the
    program's module, which checks the inputs against the program's ranges and guards; the later calls with
    that signature run its graph on flat tensors (``FlatGraph``), which skips checks that could only repeat
    the first verdict."""

    backend = "dynamo"

    def __init__(self, program: Any, max_cache_len: int | None = None) -> None:
        caches.register_cache_pytrees()
        if not isinstance(program, torch.export.ExportedProgram):
            program = load_program(program)
        self.module = program.module()
        # The cache is updated in place by the graph itself (no copy of the cache and copy back per step).
        reinplace_input_updates(self.module)
        if speedups.enabled():
            lay_out_for_one_token(self.module)
        self.flat_graph = FlatGraph(self.module)
        _, template = program.example_inputs
        self.cache_name = _cache_kwarg(template)
        cache = copy.deepcopy(template[self.cache_name])
        exported_len = max_cache_length(cache)
        self.cache = cache if max_cache_len in (None, exported_len) else resize_static_cache(cache, max_cache_len)
        self.max_cache_len = max_cache_length(self.cache)
        mask = template.get("attention_mask")
        self.mask_dtype = mask.dtype if isinstance(mask, torch.Tensor) else torch.bool
        self._takes_mask = isinstance(mask, torch.Tensor)
        self._writes: dict[str, int] = {}
        self._checked: set[tuple[Any, ...]] = set()
        kwargs_spec = self.module._in_spec.children()[1]
        self._input_order: list[str] = list(kwargs_spec.context)
        self._cache_spec = kwargs_spec.children()[self._input_order.index(self.cache_name)]
        self._cache_leaves: list[torch.Tensor] | None = None
        self._cache_names = list(caches.named_cache_tensors(self.cache, self.cache_name))
        # The cache's first tensor among the graph's flat inputs (the inputs before it are single tensors).
        self._cache_start = self._input_order.index(self.cache_name)

    def reset(self) -> None:
        self.cache.reset()
        self._cache_leaves = None

    def cache_storage(self) -> list[torch.Tensor]:
        return caches.cache_tensors(self.cache)

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return caches.named_cache_tensors(self.cache, self.cache_name)

    def runtime_writes(self) -> dict[str, int]:
        return dict(self._writes)

    def step(self, input_ids, attention_mask, position_ids):
        kwargs = {"input_ids": input_ids, "position_ids": position_ids, self.cache_name: self.cache}
        if self._takes_mask:
            kwargs["attention_mask"] = attention_mask
        signature = tuple((tuple(t.shape), t.dtype) for t in (input_ids, attention_mask, position_ids))
        with torch.no_grad():
            if signature not in self._checked or not speedups.enabled():
                out = self.module(**kwargs)
                self._checked.add(signature)
                # torch.export's module writes each USER_INPUT_MUTATION into the tensor that was passed in.
                self._writes = {
                    n: t.data_ptr()
                    for n, t in caches.named_cache_tensors(kwargs[self.cache_name], self.cache_name).items()
                }
                return out.logits
        # Inference mode, not only no_grad: no version counters or autograd metadata on the step's tensors (the
        # cache is written in place either way); the decode benchmark's loop went from 0.94x to 1.11-1.26x eager.
        with torch.inference_mode():
            out, written = self.flat_graph(self._flat_inputs(kwargs))
        self._writes = {
            self._cache_names[index - self._cache_start]: tensor.data_ptr()
            for index, tensor in written.items()
            if 0 <= index - self._cache_start < len(self._cache_names)
        }
        return out.logits

    def _flat_inputs(self, kwargs: dict[str, Any]) -> list[torch.Tensor]:
        if self._cache_leaves is None:
            self._cache_leaves = fx_pytree.tree_flatten_spec(self.cache, self._cache_spec)
        flat: list[torch.Tensor] = []
        for name in self._input_order:
            flat.extend(self._cache_leaves if name == self.cache_name else [kwargs[name]])
        return flat


def decode_loop(program_or_path: Any, backend: str, **options: Any) -> DecodeLoop:
    """The decode loop of ``backend`` (its descriptor in ``hfexport.backends``) over a decode program or its saved
    file."""
    from ..backends import backend as backend_named

    return backend_named(backend).decode_loop_class()(program_or_path, **options)

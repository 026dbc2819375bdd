"""Judge a static-cache decode loop step by step against eager ``generate()``.

``static_reference`` runs eager greedy ``generate()`` with a ``StaticCache`` and keeps,
per model call, the logits and the cache it left behind. ``drive`` then runs a
session (the guide's loop over a raw artifact, ``pytest_hfexport.guide``, or an
implementation's own loop) on the same tokens, teacher-forced: the prompt in one call,
then blocks of 1 or k tokens as the schedule says. After every call:

* the logits of each query equal eager's for that token (the backend's tolerance), and
  their argmax is eager's token;
* the keys and values the caller holds equal eager's after the same tokens (every slot of a
  real token; a sliding-window layer compared over the window eager keeps); counters an
  implementation keeps in its cache layout are judged through the logits, not compared;
* where the session promises it, the runtime wrote each cache tensor into the caller's
  memory: the address the runtime reports for the step is the caller's tensor, the same
  tensor every step.

A call whose logits differ is localised when the caller hands ``drive`` a locator: eager runs the same step
(the guide's inputs, and eager's own cache after the tokens before it, which the session's cache matched at
the previous call) with hooks on every module, and the artifact runs it with its module values kept
(``pytest_hfexport.localise``); the message then names the first module that differs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compare import compare
from .naming import cache_entry, flat_named
from .reference import capture_generation, left_padding, positions, slot_mask


class DecodeMismatch(AssertionError):
    pass


@dataclass
class StaticReference:
    prompt: Any  # [batch, prompt length]
    pads: list[int]
    tokens: Any  # [batch, new tokens]
    logits: list[Any]  # logits[i]: [batch, vocab] of model call i (0 = the prompt), which chose tokens[:, i]
    caches: list[dict[str, Any]]  # the cache (flat named) after model call i
    max_cache_len: int
    sliding: dict[str, int] = field(default_factory=dict)  # cache tensor name -> window of a sliding layer
    states: list[Any] = field(default_factory=list)  # eager's cache object after model call i (for the locator)
    keyword: str = "past_key_values"  # the model's cache keyword

    def eager_step(self, input_ids: Any, attention_mask: Any, position_ids: Any, produced: int) -> dict[str, Any]:
        """Eager's call for a step of the loop: the guide's inputs and eager's own cache before it (after
        ``produced - 1`` fed tokens; empty for the prompt)."""
        cache = copy.deepcopy(self.states[max(produced - 1, 0)])
        if produced == 0:
            for tensor in flat_named(cache).values():
                tensor.zero_()
            for layer in getattr(cache, "layers", []):
                if isinstance(getattr(layer, "cumulative_length_int", None), int):
                    layer.cumulative_length_int = 0
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            self.keyword: cache,
        }


# Given a step's eager call, the first diverging module (``pytest_hfexport.localise.Divergence``).
StepLocator = Callable[[Mapping[str, Any]], Any]


def static_reference(model: Any, inputs: Mapping[str, Any], tokens: int, max_cache_len: int) -> StaticReference:
    """Eager greedy generate() with a static cache of ``max_cache_len`` slots: tokens, logits and caches."""
    import torch
    import transformers

    config = transformers.GenerationConfig(cache_implementation="static", max_cache_len=max_cache_len)
    capture = capture_generation(model, inputs, tokens, config, keep_caches=True)
    mask = inputs.get("attention_mask")
    prompt = inputs["input_ids"]
    pads = left_padding(mask) if isinstance(mask, torch.Tensor) else [0] * prompt.shape[0]
    sliding = {}
    # The cache's flat names follow the model's keyword (past_key_values, or cache from transformers 5.25).
    prefix = cache_entry(capture.calls["model"][0])[0] or "past_key_values"
    for cache in capture.caches[:1]:
        for i, layer in enumerate(getattr(cache, "layers", [])):
            if getattr(layer, "is_sliding", False):
                for attr in ("keys", "values"):
                    sliding[f"{prefix}.layers.{i}.{attr}"] = int(getattr(layer, attr).shape[2])
    return StaticReference(
        prompt,
        pads,
        capture.tokens,
        capture.logits,
        [flat_named(c, prefix) for c in capture.caches],
        max_cache_len,
        sliding,
        list(capture.caches),
        prefix,
    )


def schedule(tokens: int, block: int = 3) -> list[int]:
    """Query blocks after the prompt: single tokens, then blocks of ``block`` (speculative acceptance), then
    single tokens to the end; ``tokens - 1`` tokens are fed (the last one is only produced)."""
    plan: list[int] = []
    fed, remaining = 0, tokens - 1
    while fed < remaining:
        k = block if (len(plan) >= 8 and len(plan) % 3 == 2 and fed + block <= remaining) else 1
        plan.append(k)
        fed += k
    return plan


def drive(
    session: Any,
    ref: StaticReference,
    backend: str,
    blocks: Sequence[int],
    label: str = "",
    locator: StepLocator | None = None,
) -> int:
    """Run ``session`` through the prompt and ``blocks``; raise DecodeMismatch at the first difference (with the
    first diverging module where ``locator`` is given and the logits differ). Returns the number of model calls
    checked."""
    import torch

    prompt_len = ref.prompt.shape[1]
    pointers: dict[str, int] = {}
    calls = 0

    def check(call: int, logits: Any, produced: range, filled: int, fed: tuple[Any, ...] = ()) -> None:
        nonlocal pointers
        for q, index in enumerate(produced):
            row = logits[:, q - len(produced)] if logits.shape[1] >= len(produced) else None
            if row is None:
                raise DecodeMismatch(
                    f"{label}call {call}: logits hold {logits.shape[1]} positions for {len(produced)} query tokens"
                )
            result = compare({"logits": ref.logits[index]}, {"logits": row}, backend, label=f"token {index}")
            if not result.ok:
                where = ""
                if locator is not None and fed:
                    ids, mask, pos = fed
                    where = "\n" + locator(ref.eager_step(ids, mask, pos, produced.start)).describe()
                raise DecodeMismatch(f"{label}call {call} (token {index}): " + "; ".join(result.failures()) + where)
            want, got = ref.tokens[:, index].tolist(), row.argmax(-1).tolist()
            if want != got:
                raise DecodeMismatch(
                    f"{label}call {call}: greedy token {index} is {got}, eager generate() chose {want}"
                )
        _check_cache(session, ref, produced[-1] if produced else 0, filled, backend, f"{label}call {call}")
        if getattr(session, "in_place", True):
            pointers = _check_in_place(session, pointers, f"{label}call {call}")

    slots = torch.arange(prompt_len)
    feed = (ref.prompt, slot_mask(slots, ref.pads, ref.max_cache_len), positions(slots, ref.pads))
    logits = session.step(*feed)
    check(calls, logits, range(0, 1), prompt_len, feed)
    produced = 1
    for k in blocks:
        calls += 1
        slots = torch.arange(prompt_len + produced - 1, prompt_len + produced - 1 + k)
        fed = ref.tokens[:, produced - 1 : produced - 1 + k]
        feed = (fed, slot_mask(slots, ref.pads, ref.max_cache_len), positions(slots, ref.pads))
        logits = session.step(*feed)
        check(calls, logits, range(produced, produced + k), prompt_len + produced - 1 + k, feed)
        produced += k
    return calls + 1


def _check_cache(session: Any, ref: StaticReference, call: int, filled: int, backend: str, where: str) -> None:
    if not getattr(session, "named_cache", True):
        return
    import torch

    got = session.cache_tensors()
    want = ref.caches[call]
    missing = [n for n in want if n not in got and (n.endswith(".keys") or n.endswith(".values"))]
    if missing:
        raise DecodeMismatch(f"{where}: the caller's cache has no {missing[:3]} (it has {sorted(got)[:6]})")
    for name, expected in want.items():
        if name not in got or not (name.endswith(".keys") or name.endswith(".values")):
            continue  # counters and other bookkeeping: the logits show whether the graph reads them right
        actual = got[name]
        if name in ref.sliding and actual.dim() == 4 and actual.shape[2] != expected.shape[2]:
            window = ref.sliding[name]
            start = max(0, filled - window)
            actual, expected = actual[:, :, start:filled], expected[:, :, : filled - start]
        elif actual.shape != expected.shape:
            raise DecodeMismatch(
                f"{where}: cache {name} has shape {tuple(actual.shape)}, eager's {tuple(expected.shape)}"
            )
        if actual.dim() == 4:  # slots of pad tokens hold whatever a pad query computed: not compared
            keep = torch.ones_like(actual, dtype=torch.bool)
            for row, pad in enumerate(ref.pads):
                keep[row, :, : min(pad, keep.shape[2])] = False
            actual, expected = torch.where(keep, actual, 0), torch.where(keep, expected, 0)
        result = compare({name: expected}, {name: actual}, backend, label="cache")
        if not result.ok:
            raise DecodeMismatch(
                f"{where}: the caller's cache differs from eager's after the same tokens: "
                + "; ".join(result.failures())
            )


def _check_in_place(session: Any, before: dict[str, int], where: str) -> dict[str, int]:
    tensors = session.cache_tensors()
    writes = session.runtime_writes()
    now = {name: t.data_ptr() for name, t in tensors.items()}
    elsewhere = [n for n, ptr in now.items() if writes.get(n) != ptr]
    if elsewhere:
        raise DecodeMismatch(
            f"{where}: the runtime did not write {elsewhere[:3]} into the caller's cache (it wrote "
            f"{'nowhere it reported' if not writes else 'to other memory'}); a loop that copies "
            "results back is not in place"
        )
    moved = [n for n, ptr in before.items() if now.get(n) != ptr]
    if moved:
        raise DecodeMismatch(f"{where}: the caller's cache tensors {moved[:3]} were replaced between steps")
    return now

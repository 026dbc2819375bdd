"""The decode contract: what an exported decode graph of every decoder-only zoo model must serve.

A. Static cache (``cache_implementation="static"``, ``multi_token_decode=True``): the saved ``decode`` graph
   is driven by the guide's loop, written out here with no help from ``hfexport.runtime``:

   * its inputs are exactly ``input_ids``, ``attention_mask`` (a 4D bool mask over the cache slots),
     ``position_ids`` and the cache;
   * ONE graph serves the prompt on an empty cache, one token per call and blocks of 3 tokens, at batch 1
     and at batch 2 with left padding (the caller resizes the example cache on axis 0 and hides each row's
     padding in the mask; a row that would be fully masked attends to its own slot);
   * greedy tokens equal eager ``generate()`` with a StaticCache, logits within 1e-4 at every step;
   * the caller's cache is written in place (Dynamo: the module writes into the tensors passed in; ONNX
     Runtime: ``input.X``/``output.X`` bound to one buffer) and holds what eager's StaticCache holds.

B. Dynamic cache (``multi_token_decode=True``, no static cache): the decode graph takes ``input_ids``
   [B, q], a 2D padding mask [B, past + q], the position ids and a DynamicCache, and serves q = 1 and 3 at
   batch 1 and 2 (left padded), with any past length (shorter than a sliding window too).

One test per model, backend and contract runs every check on one export and reports all failures at once.
Default tier: dynamo and onnx, static for every decoder, dynamic for ``DYNAMIC_FAST``; ``-m ""`` adds the
other dynamic ones and ExecuTorch (xnnpack, whose Python runtime returns the cache as outputs: the
in-place check does not apply there).
"""
from __future__ import annotations

import itertools

import pytest
import torch

from decode_contract_shared import artifacts  # noqa: F401 (the fixture)
from decode_contract_shared import (
    BACKENDS,
    Checks,
    DECODERS,
    DECODE_INPUTS,
    GUIDES,
    MAX_CACHE_LEN,
    NEW_TOKENS,
    PAD,
    causal_mask,
    close,
    eager_generate,
    exported_decode,
    greedy,
    prompt_ids,
)


# -- A. static cache -----------------------------------------------------------------------------------------------

def check_static_inputs(guide) -> None:
    assert guide.input_names == DECODE_INPUTS | {"past_key_values"}, (
        f"graph inputs {sorted(guide.input_names)}; the contract is {sorted(DECODE_INPUTS)} + past_key_values")
    dims, dtype = guide.mask_meta()
    assert dims == 4 and dtype in (torch.bool, "tensor(bool)"), f"attention_mask is {dims}D {dtype}, not 4D bool"


def check_static_batch1(guide, model, eos: int) -> None:
    """Prompt on an empty cache, then one token per call: eager generate()'s tokens and logits."""
    prompt = prompt_ids(model, 6, seed=11)
    eager = eager_generate(model, prompt, torch.ones_like(prompt))
    want = eager.sequences[0, prompt.shape[1]:].tolist()
    guide.new_cache(1)
    storage = {k: v.data_ptr() for k, v in guide.cache_tensors().items()}
    positions = torch.arange(prompt.shape[1])
    logits = guide(prompt, causal_mask(positions, MAX_CACHE_LEN), positions[None])
    close(logits[:, -1], eager.logits[0], "prompt logits")
    tokens = [int(greedy(logits[0, -1], eos))]
    for step, position in enumerate(range(prompt.shape[1], prompt.shape[1] + NEW_TOKENS - 1), start=1):
        ids = torch.tensor([[tokens[-1]]])
        logits = guide(ids, causal_mask(torch.tensor([position]), MAX_CACHE_LEN), torch.tensor([[position]]))
        close(logits[:, -1], eager.logits[step], f"step {step} logits")
        tokens.append(int(greedy(logits[0, -1], eos)))
    assert tokens == want, f"greedy tokens {tokens} != eager {want}"
    check_cache_in_place(guide, storage, eager.past_key_values, prompt.shape[1] + NEW_TOKENS - 1)


def check_cache_in_place(guide, storage: dict[str, int], eager_cache, filled: int) -> None:
    """The caller's cache tensors are the ones written, and hold eager's full-attention keys and values."""
    tensors = guide.cache_tensors()
    if getattr(guide, "in_place", True):
        assert {k: v.data_ptr() for k, v in tensors.items()} == storage, "the cache tensors were replaced"
    compared = 0
    for index, layer in enumerate(eager_cache.layers):
        if getattr(layer, "is_sliding", False):
            continue
        for kind in ("keys", "values"):
            got = tensors[f"past_key_values.layers.{index}.{kind}"][:, :, :filled]
            close(got, getattr(layer, kind)[:, :, :filled], f"cache layer {index} {kind} after {filled} tokens")
            compared += 1
    assert compared, "no full-attention layer to compare"


def check_static_blocks(guide, model) -> None:
    """Blocks of 3 accepted tokens (and single tokens) on top of a filled cache, teacher-forced with eager's tokens."""
    prompt = prompt_ids(model, 6, seed=12)
    eager = eager_generate(model, prompt, torch.ones_like(prompt))
    tokens = eager.sequences[0, prompt.shape[1]:]
    guide.new_cache(1)
    length = prompt.shape[1]
    positions = torch.arange(length)
    close(guide(prompt, causal_mask(positions, MAX_CACHE_LEN), positions[None])[:, -1], eager.logits[0], "prompt")
    fed = 0
    for k in itertools.cycle([3, 1]):
        if fed + k >= NEW_TOKENS:
            break
        positions = torch.arange(length + fed, length + fed + k)
        logits = guide(tokens[None, fed:fed + k], causal_mask(positions, MAX_CACHE_LEN), positions[None])
        for row in range(k):
            close(logits[:, row], eager.logits[fed + row + 1], f"block of {k} at token {fed}, row {row}")
        fed += k


def check_static_batch2(guide, model, eos: int) -> None:
    """Batch 2, the second row left-padded by 2: a 4D mask that hides each row's padding; per-row eager tokens."""
    long = prompt_ids(model, 6, seed=13)
    short = prompt_ids(model, 4, seed=14)
    ids = torch.cat([long, torch.cat([torch.full((1, 2), PAD), short], dim=1)])
    mask2d = torch.ones_like(ids)
    mask2d[1, :2] = 0
    eager = eager_generate(model, ids, mask2d)
    length = ids.shape[1]
    valid = torch.ones(2, MAX_CACHE_LEN, dtype=torch.bool)
    valid[:, :length] = mask2d.bool()
    slots = torch.arange(MAX_CACHE_LEN)

    def mask(query_slots: torch.Tensor) -> torch.Tensor:
        visible = (slots[None, :] <= query_slots[:, None])[None, None] & valid[:, None, None, :]
        own = (slots[None, :] == query_slots[:, None])[None, None]
        return visible | (own & ~visible.any(-1, keepdim=True))

    positions = (mask2d.cumsum(-1) - 1).masked_fill(mask2d == 0, 0)
    guide.new_cache(2)
    logits = guide(ids, mask(torch.arange(length)), positions)
    close(logits[:, -1], eager.logits[0], "padded prompt logits")
    tokens = [greedy(logits[:, -1], eos)]
    for step in range(1, NEW_TOKENS):
        logits = guide(tokens[-1][:, None], mask(torch.tensor([length + step - 1])), positions[:, -1:] + step)
        close(logits[:, -1], eager.logits[step], f"padded step {step} logits")
        tokens.append(greedy(logits[:, -1], eos))
    got = torch.stack(tokens, dim=1)
    want = eager.sequences[:, length:]
    for row in range(2):
        assert got[row].tolist() == want[row].tolist(), f"row {row}: {got[row].tolist()} != eager {want[row].tolist()}"


@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("executorch", marks=pytest.mark.hfexport_slow)])
@pytest.mark.parametrize("name", DECODERS)
def test_static_decode_graph_serves_the_guide_loop(name, backend, artifacts):
    entry, model, path = exported_decode(name, backend, "static", artifacts)
    guide = GUIDES[backend](path)
    eos = model.config.eos_token_id
    checks = Checks()
    checks.run("graph inputs", lambda: check_static_inputs(guide))
    checks.run("batch 1, 1 token per call", lambda: check_static_batch1(guide, model, eos))
    checks.run("batch 1, blocks of 3 tokens", lambda: check_static_blocks(guide, model))
    checks.run("batch 2, left padded", lambda: check_static_batch2(guide, model, eos))
    checks.done()

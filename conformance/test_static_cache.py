"""Static KV cache with multi-token decode: one decode graph serves the prompt (empty cache) and every
new token; a full prefill + greedy decode loop from the saved artifact equals eager generate(), and
the cache the loop passes in is the one updated, in place, where the backend promises that."""

from pathlib import Path

import pytest
import torch
import transformers

from conformance.conftest import entry_params
from hfexport.runtime import RUNNERS_BY_SUFFIX

MAX_CACHE_LEN = 32
NEW_TOKENS = 16


def static_options() -> dict:
    return {"multi_token_decode": True,
            "generation_config": transformers.GenerationConfig(cache_implementation="static",
                                                               max_cache_len=MAX_CACHE_LEN)}


@pytest.fixture
def static_loop(generation_exported, hfexport_backend):
    def build(entry):
        from hfexport.runtime.decode import decode_loop

        result = generation_exported(entry, **static_options())
        if Path(str(result.paths["decode"])).suffix not in RUNNERS_BY_SUFFIX:
            from pytest_hfexport import Unsupported

            raise Unsupported(f"hfexport.runtime's decode loops read {sorted(RUNNERS_BY_SUFFIX)} artifacts; this "
                              f"implementation saved {result.paths['decode']}")
        return result, decode_loop(str(result.paths["decode"]), hfexport_backend, max_cache_len=MAX_CACHE_LEN)

    return build


@pytest.mark.parametrize("entry", entry_params("static_cache"))
def test_decode_loop_matches_eager_generate(entry, static_loop):
    result, loop = static_loop(entry)
    prompt = result.inputs["input_ids"][:1]
    got = loop.generate(prompt, NEW_TOKENS)
    config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                           cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    with torch.no_grad():
        expected = result.model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                          generation_config=config)
    assert got.tokens == expected[0, prompt.shape[1]:].tolist()


@pytest.mark.parametrize("entry", entry_params("static_cache", case="static_cache_in_place"))
def test_cache_is_updated_in_place(entry, static_loop, hfexport_backend):
    from pytest_hfexport import Unsupported

    result, loop = static_loop(entry)
    storage = loop.cache_storage()
    if not storage:
        raise Unsupported(f"the {hfexport_backend} loop reads the updated cache back from the outputs (the ExecuTorch "
                          "Python runtime does not write a mutated user input into the caller's tensor)")
    pointers = [t.data_ptr() for t in storage]
    loop.generate(result.inputs["input_ids"][:1], 4)
    after = loop.cache_storage()
    assert [t.data_ptr() for t in after] == pointers, "the loop's cache tensors were replaced, not updated"
    assert any(bool(t.abs().sum() > 0) for t in after), "the cache passed in was not written"

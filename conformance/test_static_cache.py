"""Static KV cache with multi-token decode: one decode graph, 1 and k query tokens, the cache updated
in place, and a full prefill + greedy decode loop from the saved artifact equal to eager generate()."""

import copy

import pytest
import torch
import transformers

from conformance.checks import assert_matches
from conformance.conftest import entry_params

MAX_CACHE_LEN = 32
NEW_TOKENS = 16


@pytest.fixture
def static_decode(hfexport_implementation, hfexport_backend, tmp_path):
    def build(entry):
        model = entry.model()
        inputs = entry.sample_inputs(model)
        exporter = hfexport_implementation.exporter(hfexport_backend)
        if not hasattr(exporter, "export_for_generation"):
            from pytest_hfexport import Unsupported

            raise Unsupported(f"{hfexport_implementation.name} has no export_for_generation")
        config = hfexport_implementation.config(hfexport_backend, dynamic=True)
        generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
        programs = exporter.export_for_generation(model, inputs, config, generation_config=generation,
                                                  multi_token_decode=True)
        path = hfexport_implementation.save(exporter, programs["decode"], tmp_path, "decode")
        return model, inputs, programs["decode"], path

    return build


@pytest.mark.parametrize("entry", entry_params("static_cache"))
def test_decode_loop_matches_eager_generate(entry, static_decode, hfexport_backend):
    from hfexport.runtime.decode import decode_loop

    model, inputs, _, path = static_decode(entry)
    prompt = inputs["input_ids"][:1]
    loop = decode_loop(str(path), hfexport_backend, max_cache_len=MAX_CACHE_LEN)
    result = loop.generate(prompt, NEW_TOKENS)
    config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                           cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    assert result.tokens == expected[0, prompt.shape[1]:].tolist()

"""Eager attention's key/value repeat: a program traced on a prompt serves one token (``patching.repeat_kv``)."""

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter
from hfexport.patching import PATCHES
from hfexport.patching.registry import expand_path

from helpers import tiny_llama


def _eager_llama():
    model, sample = tiny_llama()
    model.set_attn_implementation("eager")
    return model, sample


def test_the_replacement_repeats_heads_as_the_modeling_code_does():
    from transformers.models.llama import modeling_llama

    (patch,) = [p for p in PATCHES["dynamo"] if p.path.endswith(".repeat_kv")]
    replacement = patch.factory(modeling_llama.repeat_kv)
    states = torch.randn(2, 3, 5, 4)
    for n_rep in (1, 2, 4):
        assert torch.equal(replacement(states, n_rep), modeling_llama.repeat_kv(states, n_rep))


def test_the_pattern_names_every_loaded_modeling_file_and_nothing_unloaded():
    import transformers.models.llama.modeling_llama  # noqa: F401

    paths = expand_path("transformers.models.*.repeat_kv")
    assert "transformers.models.llama.modeling_llama.repeat_kv" in paths
    assert all(p.rsplit(".", 1)[0] in __import__("sys").modules for p in paths)
    assert expand_path("torch.matmul") == ["torch.matmul"]


@pytest.mark.parametrize("patched", [True, pytest.param(False, id="fault-unpatched")])
def test_a_program_of_eager_attention_traced_on_a_prompt_serves_one_token(patched, monkeypatch):
    """Without the patch (the fault) the program refuses the one-token call with torch's ``!= 1`` guard."""
    if not patched:
        monkeypatch.setitem(PATCHES, "dynamo", [p for p in PATCHES["dynamo"] if not p.path.endswith(".repeat_kv")])
    model, sample = _eager_llama()
    program = DynamoExporter().export(model, sample, DynamoConfig(dynamic=True))
    one = {"input_ids": sample["input_ids"][:, :1], "attention_mask": sample["attention_mask"][:, :1]}
    if not patched:
        with pytest.raises(Exception, match=r"!= 1"):
            program.module()(**one)
        return
    with torch.no_grad():
        expected = model(**one).logits
    torch.testing.assert_close(program.module()(**one).logits, expected, atol=2e-6, rtol=3e-5)

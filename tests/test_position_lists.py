"""Funnel's relative-shift position tables from the length's symbol equal the model's own, list-built ones."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from hfexport.patching.position_lists import Positions, _relative_tables, pooled_positions, relative_distances


def _structure(separate_cls: bool, truncate_seq: bool, blocks: int) -> tf.models.funnel.modeling_funnel.FunnelAttentionStructure:
    config = tf.FunnelConfig(
        d_model=16, n_head=2, d_head=8, d_inner=32, block_sizes=[1] * blocks, separate_cls=separate_cls,
        truncate_seq=truncate_seq,
    )
    return tf.models.funnel.modeling_funnel.FunnelAttentionStructure(config).eval()


@pytest.mark.parametrize("separate_cls,truncate_seq", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("blocks", [2, 3])
def test_tables_equal_the_models_own_at_every_length(separate_cls, truncate_seq, blocks):
    structure = _structure(separate_cls, truncate_seq, blocks)
    compared = 0
    for seq_len in range(1, 24):
        try:
            expected = structure.get_position_embeds(seq_len, torch.float32, "cpu")
        except RuntimeError:  # the model itself refuses lengths too short for its pooling (its gather overruns)
            continue
        compared += 1
        got = _relative_tables(structure, seq_len, torch.float32, "cpu")
        for block, (want, have) in enumerate(zip(expected, got)):
            for a, b in zip(want, have):
                if a is None:
                    assert b is None
                else:
                    assert torch.equal(a, b), (seq_len, block)
    assert compared >= 18


def test_positions_follow_the_lists_they_stand_for():
    structure = _structure(True, True, 3)
    for n in range(1, 20):
        listed, positions = list(range(n)), Positions.up_to(n)
        for block in (1, 2):
            listed = structure.stride_pool_pos(listed, block)
            positions = pooled_positions(structure.config, positions, block)
            assert (positions.size, positions.first, positions.last) == (len(listed), listed[0], listed[-1])
            want = structure.relative_pos(listed, 2**block)
            assert torch.equal(relative_distances(positions, 2**block), want)


def _cpmant() -> tf.CpmAntForCausalLM:
    torch.manual_seed(0)
    config = tf.CpmAntConfig(
        vocab_size=64, hidden_size=32, num_attention_heads=4, dim_head=8, dim_ff=64, num_hidden_layers=2,
        prompt_length=4, position_bias_num_buckets=32, position_bias_max_distance=64,
    )
    return tf.CpmAntForCausalLM(config).eval()


def test_cpmant_mask_equals_the_models_own_with_left_padding():
    from hfexport.patching.position_lists import _cpmant_attention_mask

    model = _cpmant().cpmant
    original = type(model)._prepare_attention_mask
    patched = _cpmant_attention_mask(original)
    for text in range(1, 12):
        seqlen = text + model.prompt_length
        ids = torch.ones(3, seqlen, dtype=torch.int32)
        span = torch.zeros(3, seqlen, dtype=torch.int32)
        context = torch.ones(3, seqlen, dtype=torch.int32)
        length = torch.tensor([text, max(text - 2, 0), 1], dtype=torch.int32)  # rows with left padding
        assert torch.equal(patched(model, ids, span, context, length), original(model, ids, span, context, length))


def test_cpmant_exports_one_graph_for_every_length():
    """Without the patch the program is the sample length's only (a guard input_ids.size()[1] == 5)."""
    from hfexport import DynamoConfig, DynamoExporter

    model = _cpmant()
    sample = {"input_ids": torch.randint(1, 64, (1, 5)), "use_cache": False}
    program = DynamoExporter().export(model, sample, DynamoConfig(dynamic=True))
    for batch, length in ((1, 5), (2, 9), (1, 3)):
        ids = torch.randint(1, 64, (batch, length))
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False).logits
        got = program.module()(input_ids=ids)
        got = got["logits"] if isinstance(got, dict) else got[0]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

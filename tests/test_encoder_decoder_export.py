"""Encoder-decoder exports keep the query axis (and batch) symbolic: t5's position bias through the
branch-free SDPA, and whisper's ``transpose(1, 2).contiguous()`` query without a size guard."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from hfexport import DynamoConfig, DynamoExporter
from hfexport.patching import apply_patches
from hfexport.patching.attention import export_sdpa_factory
from hfexport.patching.contiguity import known_contiguous

from helpers import assert_matches, eager, zoo_model

ATOL = 1e-5


class _Module(torch.nn.Module):
    is_causal = True


# No mask, causal, fewer queries than keys is left out: transformers crops the keys to the query there
# (an empty static cache), the export path is bottom-right causal; the two legitimately differ.
SDPA_CASES = [
    (q_len, kv_len, mask_kind, is_causal)
    for q_len, kv_len in [(1, 5), (3, 3), (2, 6)]
    for mask_kind in ["none", "bool", "float"]
    for is_causal in [True, False]
    if not (mask_kind == "none" and is_causal and kv_len != q_len)
]


@pytest.mark.parametrize("q_len, kv_len, mask_kind, is_causal", SDPA_CASES)
def test_branch_free_sdpa_folds_position_bias_like_transformers(q_len, kv_len, mask_kind, is_causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, q_len, 8), torch.randn(2, 4, kv_len, 8), torch.randn(2, 4, kv_len, 8)
    bias = torch.randn(1, 4, q_len, kv_len)
    visible = torch.rand(2, 1, q_len, kv_len) > 0.3
    visible[..., -1] = True
    mask = {"none": None, "bool": visible, "float": torch.zeros(visible.shape).masked_fill(~visible, -1e9)}[mask_kind]
    module = _Module()
    expected, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=1.0, is_causal=is_causal, position_bias=bias)
    got, _ = export_sdpa_factory(sdpa_attention_forward)(
        module, q, k, v, mask, scaling=1.0, is_causal=is_causal, position_bias=bias
    )
    torch.testing.assert_close(got, expected)


def test_t5_plain_export_serves_one_token_and_other_lengths():
    """The export traced at 6 encoder / 3 decoder tokens also serves 1 and 9 (it guarded q_length > 1)."""
    entry, model = zoo_model("t5")
    program = DynamoExporter().export(model, entry.sample_inputs(model), DynamoConfig(dynamic=True))
    for label, inputs in entry.input_sets(model, ("one", "other", "batch")).items():
        with torch.no_grad():  # as eager: with grad on, CPU SDPA picks its math kernel (other rounding)
            got = program.module()(**inputs)
        assert_matches(eager(model, inputs), got, "dynamo", tolerance=ATOL, label=label)


class _TransposedQuery(torch.nn.Module):
    """whisper's query: ``proj(x).view(b, s, heads, d).transpose(1, 2).contiguous()``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        b, s, _ = inputs_embeds.shape
        query = self.proj(inputs_embeds).view(b, s, 4, 4).transpose(1, 2).contiguous()
        return query.view(b, 4, s * 4) * 2


@pytest.mark.parametrize("sample_len", [1, 3])
def test_contiguous_of_a_transposed_view_does_not_pin_the_sequence(sample_len):
    """Traced at one token it pinned batch and length to 1..2; traced at 3 it refused one token."""
    torch.manual_seed(0)
    module = _TransposedQuery().eval()
    sample = {"inputs_embeds": torch.randn(1, sample_len, 16)}
    program = DynamoExporter().export(module, sample, DynamoConfig(dynamic=True))
    for batch, seq in [(1, 1), (1, 5), (3, 1), (2, 4)]:
        hidden = torch.randn(batch, seq, 16)
        torch.testing.assert_close(program.module()(inputs_embeds=hidden), module(hidden))


def test_contiguous_patch_keeps_known_contiguous_tensors_and_is_reverted():
    x = torch.randn(2, 3, 4)
    assert known_contiguous(x) and not known_contiguous(x.transpose(0, 1))
    original = torch.Tensor.contiguous
    with apply_patches("dynamo"):
        assert torch.Tensor.contiguous is not original
        y = x.contiguous()
        assert y is x  # static shapes: the original method (no copy)
        t = x.transpose(1, 2)
        torch.testing.assert_close(t.contiguous(), t)
    assert torch.Tensor.contiguous is original
    assert "contiguous" not in torch.Tensor.__dict__


def test_whisper_plain_export_serves_one_decoder_token():
    """Traced at 3 decoder tokens, it also serves 1 (the transposed query's contiguous() guarded length != 1)."""
    entry, model = zoo_model("whisper")
    program = DynamoExporter().export(model, entry.sample_inputs(model), DynamoConfig(dynamic=True))
    for label, inputs in entry.input_sets(model, ("one", "batch")).items():
        with torch.no_grad():  # as eager: with grad on, CPU SDPA picks its math kernel (other rounding)
            got = program.module()(**inputs)
        assert_matches(eager(model, inputs), got, "dynamo", tolerance=ATOL, label=label)


def test_t5_program_runs_with_grad_enabled():
    """With grad on, CPU SDPA returns [batch, heads, query, dim] memory, not the layout the trace saw: the
    attention output is copied, so t5's reshape is not traced as a view that fails at run time."""
    entry, model = zoo_model("t5")
    program = DynamoExporter().export(model, entry.sample_inputs(model), DynamoConfig(dynamic=True))
    inputs = entry.input_sets(model, ("other",))["other"]
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=1e-4)


@pytest.mark.parametrize(
    "name, order",
    [
        ("t5", ["input_ids", "attention_mask", "decoder_input_ids"]),
        ("whisper", ["input_features", "decoder_input_ids"]),
        ("vision_encoder_decoder", ["pixel_values", "decoder_input_ids"]),
    ],
)
def test_plain_export_takes_the_inputs_in_the_callers_order(name, order):
    """A positional caller (an ExecuTorch method has no input names) passes an encoder-decoder's tensors in the
    order it holds them; only the decode loop's inputs (ids, mask, positions, cache) are moved first. Putting
    ``decoder_input_ids`` among those sent t5's mask into its decoder ids when run positionally."""
    entry, model = zoo_model(name)
    inputs = entry.sample_inputs(model)
    assert [k for k, v in inputs.items() if isinstance(v, torch.Tensor)] == order
    program = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
    assert [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"] == order

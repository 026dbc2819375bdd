"""Routers that cast themselves inside forward, and expert loops over the experts a batch hits, still export.

SwitchTransformers' router runs ``self.classifier = self.classifier.to(self.dtype)`` on every call
(``patching.module_to`` makes a same-dtype ``Module.to()`` a no-op while tracing), and its experts loop
over ``nonzero()`` routing hits (``patching.moe`` runs every expert and keeps the routed one). Each test
that checks a fix has a twin that removes the patch and watches the export fail the way it did before.
"""

from __future__ import annotations

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter
from hfexport.errors import HfExportError
from hfexport.patching import PATCHES
from hfexport.patching.module_to import changes_nothing


class SelfCastingRouter(torch.nn.Module):
    """SwitchTransformers' router in miniature: it re-casts its classifier on every forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.classifier = torch.nn.Linear(8, 4)
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))  # Module.to(float32) leaves it int64
        self.dtype = torch.float32

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(hidden.to(self.dtype)).softmax(-1)


def _without(monkeypatch: pytest.MonkeyPatch, path_suffix: str) -> None:
    kept = [patch for patch in PATCHES["dynamo"] if not patch.path.endswith(path_suffix)]
    assert len(kept) < len(PATCHES["dynamo"]), f"no dynamo patch ends with {path_suffix}"
    monkeypatch.setitem(PATCHES, "dynamo", kept)


def test_a_same_dtype_to_changes_nothing_and_a_real_cast_does() -> None:
    router = SelfCastingRouter()
    assert changes_nothing(router, torch.float32)
    assert changes_nothing(router, "cpu")
    assert changes_nothing(router, device="cpu", dtype=torch.float32)
    assert not changes_nothing(router, torch.float64)  # the float parameters would change
    assert not changes_nothing(router, memory_format=torch.channels_last)
    assert not changes_nothing(router, torch.int64)  # the original refuses it with its own error
    assert changes_nothing(router.half().float(), torch.float32)


def test_a_router_that_casts_itself_exports_and_matches() -> None:
    router = SelfCastingRouter()
    hidden = torch.randn(2, 5, 8)
    program = DynamoExporter().export(router, {"hidden": hidden}, DynamoConfig(dynamic=True))
    other = torch.randn(3, 7, 8)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(hidden=other), router(other))
    assert router.classifier.weight.dtype == torch.float32


def test_without_the_patch_the_self_cast_fails_to_export(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "torch.nn.Module.to")
    with pytest.raises(HfExportError, match="Couldn't swap"):
        DynamoExporter().export(SelfCastingRouter(), {"hidden": torch.randn(2, 5, 8)}, DynamoConfig(dynamic=True))


def _tiny_switch() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import SwitchTransformersConfig, SwitchTransformersForConditionalGeneration

    from conformance.zoo.entries import TINY_T5

    # expert_capacity below the tokens a batch routes, so capacity overflow (zeroed tokens) is exercised
    config = SwitchTransformersConfig(
        **{**TINY_T5, "vocab_size": 64}, num_experts=4, expert_capacity=3, encoder_sparse_step=1, decoder_sparse_step=1
    )
    torch.manual_seed(0)
    model = SwitchTransformersForConditionalGeneration(config).eval()
    inputs = {
        "input_ids": torch.randint(1, 64, (1, 6)),
        "attention_mask": torch.ones(1, 6, dtype=torch.int64),
        "decoder_input_ids": torch.randint(1, 64, (1, 3)),
    }
    return model, inputs


def test_switch_transformers_exports_dynamic_and_matches_eager() -> None:
    model, inputs = _tiny_switch()
    program = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
    other = {
        "input_ids": torch.randint(1, 64, (2, 9)),
        "attention_mask": torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9]),
        "decoder_input_ids": torch.randint(1, 64, (2, 4)),
    }
    for feed in (inputs, other):
        with torch.no_grad():
            expected = model(**feed).logits
        torch.testing.assert_close(program.module()(**feed).logits, expected, atol=1e-5, rtol=1e-4)


def test_without_the_dense_experts_switch_stops_at_a_data_dependent_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "SwitchTransformersExperts.forward")
    model, inputs = _tiny_switch()
    with pytest.raises(HfExportError, match="data-dependent"):
        DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))


class EagerAttentionScores(torch.nn.Module):
    """Eager attention's scores, as models without an SDPA path compute them (SwitchTransformers)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, s, _ = hidden.shape
        query = self.q(hidden).view(b, s, 2, 4).transpose(1, 2)
        key = self.k(hidden).view(b, s, 2, 4).transpose(1, 2)
        return torch.matmul(query, key.transpose(2, 3)).softmax(-1)


def test_eager_attention_traced_at_six_tokens_serves_one() -> None:
    model = EagerAttentionScores()
    program = DynamoExporter().export(model, {"hidden": torch.randn(1, 6, 8)}, DynamoConfig(dynamic=True))
    for hidden in (torch.randn(1, 1, 8), torch.randn(3, 9, 8)):
        with torch.no_grad():
            torch.testing.assert_close(program.module()(hidden=hidden), model(hidden))


def test_without_the_matmul_patch_eager_attention_refuses_one_token(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "torch.matmul")
    program = DynamoExporter().export(EagerAttentionScores(), {"hidden": torch.randn(1, 6, 8)}, DynamoConfig(dynamic=True))
    with pytest.raises(AssertionError, match=r"Guard failed: hidden\.size\(\)\[1\] != 1"):
        program.module()(hidden=torch.randn(1, 1, 8))


def _privacy_filter_experts():
    import transformers as tf
    from transformers.models.openai_privacy_filter import modeling_openai_privacy_filter as opf

    config = tf.OpenAIPrivacyFilterConfig(
        hidden_size=16, intermediate_size=8, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=1
    )
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    experts = opf.OpenAIPrivacyFilterExperts(config)
    for parameter in experts.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    return experts


def test_privacy_filter_dense_experts_equal_the_eager_loop() -> None:
    """Every expert on every token, summed in expert order: the loop's float32 sums, bit for bit here."""
    from hfexport.patching.moe import _dense_float32_experts

    experts = _privacy_filter_experts()
    dense = _dense_float32_experts(type(experts).forward)
    torch.manual_seed(1)
    hidden = torch.randn(7, 16)
    indices = torch.stack([torch.randperm(4)[:2] for _ in range(7)])
    weights = torch.rand(7, 2)
    with torch.no_grad():
        torch.testing.assert_close(
            dense(experts, hidden, indices, weights), experts(hidden, indices, weights), atol=1e-6, rtol=1e-6
        )


def test_privacy_filter_experts_export_dynamic_and_match_eager() -> None:
    class Routed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = _privacy_filter_experts()
            self.router = torch.nn.Linear(16, 4)

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            top, indices = torch.topk(self.router(hidden), 2, dim=-1)
            return self.experts(hidden, indices, top.softmax(-1))

    model = Routed().eval()
    program = DynamoExporter().export(model, {"hidden": torch.randn(5, 16)}, DynamoConfig(dynamic=True))
    for tokens in (5, 11):
        hidden = torch.randn(tokens, 16)
        with torch.no_grad():
            torch.testing.assert_close(program.module()(hidden=hidden), model(hidden), atol=1e-5, rtol=1e-5)


def test_without_the_dense_experts_the_privacy_filter_stops_at_a_data_dependent_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without(monkeypatch, "OpenAIPrivacyFilterExperts.forward")
    experts = _privacy_filter_experts()
    inputs = {"hidden_states": torch.randn(5, 16), "router_indices": torch.tensor([[0, 1]] * 5),
              "routing_weights": torch.rand(5, 2)}
    with pytest.raises(HfExportError, match="data-dependent"):
        DynamoExporter().export(experts, inputs, DynamoConfig(dynamic=True))

"""Small shared helpers for the unit tests: zoo models, eager runs, and asserting outputs match eager.

The comparison is the repository's one verdict engine, ``pytest_hfexport.compare.compare``; this module
only names the tensors (``pytest_hfexport.naming.flat_named``) and asserts its verdict.
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.zoo import get
from pytest_hfexport.compare import ToleranceSpec, compare
from pytest_hfexport.naming import flat_named


def tiny_llama(layers: int = 2) -> tuple[Any, dict[str, torch.Tensor]]:
    """A seeded Llama (hidden 32, 2 heads, 1 KV head) of ``layers`` decoder layers and a batch-2 sample: for tests
    that need a model's depth, which the zoo's fixed entries do not vary."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                      num_key_value_heads=1, num_hidden_layers=layers, vocab_size=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model, {"input_ids": torch.randint(0, 64, (2, 5)), "attention_mask": torch.ones(2, 5, dtype=torch.long)}


def zoo_model(name: str):
    entry = get(name)
    model = entry.model()
    return entry, model


def assert_matches(reference: Any, candidate: Any, backend: str, *, tolerance: ToleranceSpec = None,
                   label: str = "sample", ordered: bool = False) -> None:
    """``candidate`` has exactly ``reference``'s outputs (same names, shapes and dtype kinds), each within
    ``tolerance`` (default: the backend's per-dtype bar). Either side may be a structured model output or an
    already flat ``{name: tensor}`` dict; ``ordered`` also requires the names in the same order."""
    expected, got = flat_named(reference), flat_named(candidate)
    if ordered:
        assert list(got) == list(expected), f"output names differ: {list(got)} != {list(expected)}"
    result = compare(expected, got, backend, tolerance=tolerance, label=label, strict_names=True)
    assert result.ok, result.message()


def eager(model, inputs):
    with torch.no_grad():
        return model(**inputs)


def static_decode_export(export_format: str, **exporter_options: Any) -> tuple[Any, torch.Tensor]:
    """(the static-cache ``decode`` program of a tiny GQA llama, a 6-token prompt): 32 cache slots,
    ``multi_token_decode=True``, exported by hfexport to ``export_format`` (an exporter built with
    ``exporter_options``, e.g. ``cache_as_buffers=True``)."""
    import transformers

    from hfexport import AutoExportConfig, AutoHfExporter

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                      max_position_embeddings=128, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(3, 128, (1, 6))
    export_config = AutoExportConfig.from_dict({"export_format": export_format, "dynamic": True})
    exporter = type(AutoHfExporter.from_config(export_config))(**exporter_options)
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=32, pad_token_id=0)
    programs = exporter.export_for_generation(model, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)},
                                              export_config, multi_token_decode=True, generation_config=generation)
    return programs["decode"], prompt


class BufferCounter(torch.nn.Module):
    """Writes a buffer in place on every call (state a program owns) and reads a weight: for tests of anything
    that shares loaded programs, which must share the weight and never the buffer."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((3,), scale))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * self.weight + self.calls


def count_export_loads(monkeypatch: Any) -> list[str]:
    """Patch ``torch.export.load`` to record each path it reads (still reading it); returns the record."""
    calls: list[str] = []
    original = torch.export.load

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(torch.export, "load", counting)
    return calls

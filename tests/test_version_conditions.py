"""Registry entries with a version condition (``when``): applied on the releases they answer, skipped elsewhere,
and the onnxscript 0.6 fixes of the window's oldest ONNX pair correct wherever they run.

The two ONNX fixes are run here on every stack (forced), because a fix must keep eager's result whatever
onnxscript translates; on onnxscript 0.6 (``make compat STACKS=onnxruntime-1.30``) the export tests below fail
without them (llava's logits 0.57 off; funnel's post-processing raises).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hfexport import environment
from hfexport.patching import onnx_fixes, registry


def test_holds_reads_requirement_specifiers():
    torch_version = environment.strip_local(torch.__version__)
    assert environment.holds(None)
    assert environment.holds(f"torch=={torch_version}")
    assert not environment.holds(f"torch!={torch_version}")
    assert not environment.holds(f"torch=={torch_version}; torch<0.1")
    assert not environment.holds("a-package-that-is-not-installed>=0")


def test_a_fix_for_other_releases_is_skipped(monkeypatch):
    seen: list[str] = []
    monkeypatch.setitem(registry.FX_NODE_FIXES, "test-when", [])

    @registry.register_fx_node_fix("test-when", reason="a fix for a torch that is not installed", when="torch<0.1")
    def _never(graph_module, node):
        seen.append("never")
        return False

    @registry.register_fx_node_fix("test-when", reason="a fix for every release")
    def _always(graph_module, node):
        seen.append("always")
        return False

    graph_module = torch.fx.symbolic_trace(torch.nn.ReLU())
    registry.apply_fx_node_fixes("test-when", graph_module)
    assert "never" not in seen and "always" in seen


def test_the_onnxscript_fixes_say_which_releases():
    fixes = {fix.fn.__name__: fix for fix in registry.FX_NODE_FIXES["onnx"]}
    for name in ("_masked_scatter_with_a_full_mask", "_slice_scatter_with_explicit_bounds"):
        assert fixes[name].when == "onnxscript<0.7"
        assert fixes[name].applies == environment.holds("onnxscript<0.7")


class _Placeholders(torch.nn.Module):
    """llava's merge: a same-rank mask (B, S, 1) broadcast against the embeddings (B, S, D)."""

    def forward(self, embeds: torch.Tensor, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        mask = (ids == 7).unsqueeze(-1)
        return embeds.masked_scatter(mask, features)


class _OpenSliceScatter(torch.nn.Module):
    """funnel's relative shift: slice_scatter with no start."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x, y * 2, dim=1, end=y.shape[1])


def _inputs_placeholders():
    ids = torch.tensor([[1, 7, 7, 3, 7, 2]])
    return (torch.randn(1, 6, 4), ids, torch.randn(3, 4))


def _inputs_slice():
    return (torch.randn(2, 5, 3), torch.randn(2, 3, 3))


@pytest.mark.parametrize(
    "module, make_inputs, fix",
    [
        (_Placeholders, _inputs_placeholders, onnx_fixes._masked_scatter_with_a_full_mask),
        (_OpenSliceScatter, _inputs_slice, onnx_fixes._slice_scatter_with_explicit_bounds),
    ],
    ids=["masked_scatter", "slice_scatter"],
)
def test_an_onnxscript_fix_keeps_eager_s_result(module, make_inputs, fix, monkeypatch):
    """Forced on this stack: the rewritten graph, translated by whichever onnxscript is installed, equals eager."""
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    from hfexport import OnnxConfig, OnnxExporter

    others = [f for f in registry.FX_NODE_FIXES["onnx"] if f.fn is not fix]
    rewrites: list[bool] = []

    def counting(graph_module, node):
        rewrites.append(fix(graph_module, node))
        return rewrites[-1]

    monkeypatch.setitem(registry.FX_NODE_FIXES, "onnx", [*others, registry.Fix("onnx", counting, "forced", None)])
    model = module().eval()
    inputs = make_inputs()
    names = list(model.forward.__code__.co_varnames[1 : 1 + len(inputs)])
    program = OnnxExporter().export(model, dict(zip(names, inputs)), config=OnnxConfig(dynamic=False))
    assert any(rewrites), "the fix did not rewrite the node it exists for"
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})[0]
    np.testing.assert_allclose(got, model(*inputs).numpy(), rtol=0, atol=1e-6)

"""The Dynamo decode loop's linear weights laid out for one-token steps: [in, out] memory, same shape and values,
every name of a tied table given the one new tensor, the program's own tensors untouched, off with the
speed-ups."""

from __future__ import annotations

import torch

from helpers import static_decode_export

from hfexport import speedups
from hfexport.runtime.weight_layout import lay_out_for_one_token


class TiedHead(torch.nn.Module):
    """An embedding tied to the head, a plain linear, and a weight a matmul reads (not a linear: it stays)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.proj = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight
        self.mix = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        return self.head(self.proj(hidden) + hidden @ self.mix)


def test_linear_weights_become_in_out_memory_and_a_tied_table_stays_one_tensor():
    torch.manual_seed(0)
    model = TiedHead().eval()
    ids = torch.tensor([[1, 5, 7]])
    program = torch.export.export(model, (ids,))
    saved = {name: (tensor.stride(), tensor.data_ptr()) for name, tensor in program.state_dict.items()}
    module = program.module()
    expected = module(ids)

    assert lay_out_for_one_token(module) == 2  # proj's weight and the tied table; not mix, not the bias
    assert module.proj.weight.stride() == (1, 8) and module.proj.weight.shape == (8, 8)
    assert module.head.weight is module.embed.weight, "a tied table must stay one tensor (no second copy in memory)"
    assert module.head.weight.stride() == (1, 16)
    assert module.mix.is_contiguous() and module.proj.bias.is_contiguous()
    assert {name: (t.stride(), t.data_ptr()) for name, t in program.state_dict.items()} == saved
    torch.testing.assert_close(module(ids), expected)


def test_the_decode_loop_lays_out_its_weights_unless_the_speedups_are_off():
    from hfexport.runtime.decode import DynamoDecodeLoop

    program, prompt = static_decode_export("dynamo")
    loop = DynamoDecodeLoop(program)
    with speedups.speedups_off():
        plain = DynamoDecodeLoop(program)
    parameters = dict(loop.flat_graph.graph_module.named_parameters())
    linears = {n: p for n, p in parameters.items() if n.endswith(("proj.weight", "head.weight"))}
    assert len(linears) == 2 * 7 + 1 and all(p.stride() == (1, p.shape[0]) for p in linears.values())
    assert parameters["model.embed_tokens.weight"].is_contiguous()  # read by a lookup only
    assert all(p.is_contiguous() for p in plain.flat_graph.graph_module.parameters())
    assert loop.generate(prompt, 8).tokens == plain.generate(prompt, 8).tokens


def test_a_weight_another_node_reads_otherwise_keeps_its_layout():
    """A second ``get_attr`` of the same weight that views it flat: relaid, the view would fail (a transposed
    tensor has no flat view), so the weight stays as it is."""
    model = torch.nn.Linear(4, 3)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    linear = graph.call_function(torch.ops.aten.linear.default, (x, graph.get_attr("weight")))
    flat = graph.call_function(torch.ops.aten.view.default, (graph.get_attr("weight"), [-1]))
    graph.output((linear, flat))
    module = torch.fx.GraphModule(model, graph)

    assert lay_out_for_one_token(module) == 0
    assert module.weight.is_contiguous()
    module(torch.randn(2, 4))

"""Cache updates written in place in the Dynamo decode loop: same outputs, same caller-owned cache, no copies;
and no rewrite where the old cache value is still read after the update."""

from __future__ import annotations

import copy

import torch

from helpers import static_decode_export

from hfexport.runtime.reinplace import reinplace_input_updates

aten = torch.ops.aten


class CacheUpdate(torch.nn.Module):
    def forward(self, cache: torch.Tensor, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(2, pos, x)
        return cache.sum(dim=2)


def _program_module() -> tuple[torch.fx.GraphModule, tuple]:
    torch.manual_seed(0)
    args = (torch.zeros(1, 2, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor([3]))
    # run_decompositions functionalises the graph, as every saved hfexport program is
    return torch.export.export(CacheUpdate(), args).run_decompositions({}).module(), args


def _copies(module: torch.fx.GraphModule) -> int:
    return sum(1 for n in module.graph.nodes if n.target is aten.copy_.default)


def test_update_writes_into_the_callers_cache_without_a_copy_back():
    module, (cache, x, pos) = _program_module()
    reference = copy.deepcopy(module)
    assert _copies(module) == 1
    assert reinplace_input_updates(module) == 1
    assert _copies(module) == 0
    mine, theirs = cache.clone(), cache.clone()
    address = mine.data_ptr()
    for step in range(3):
        x = torch.randn_like(x)
        position = torch.tensor([step])
        torch.testing.assert_close(module(mine, x, position), reference(theirs, x, position), rtol=0, atol=0)
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
        assert mine.data_ptr() == address


def test_no_rewrite_when_the_old_cache_is_read_after_the_update():
    graph = torch.fx.Graph()
    cache, x, pos = (graph.placeholder(name) for name in ("cache", "x", "pos"))
    update = graph.call_function(aten.index_copy.default, (cache, 2, pos, x))
    old = graph.call_function(aten.mul.Tensor, (cache, 2))  # reads the cache as it was, after the update
    graph.call_function(aten.copy_.default, (cache, update))
    graph.output(graph.call_function(aten.add.Tensor, (old, update)))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert reinplace_input_updates(module) == 0
    assert _copies(module) == 1


def test_decode_loop_rewrites_every_layer_and_matches_the_plain_module():
    from hfexport.runtime.decode import DynamoDecodeLoop
    from hfexport.runtime.dynamo import FlatGraph
    from hfexport.runtime.weight_layout import lay_out_for_one_token

    program, prompt = static_decode_export("dynamo")
    loop = DynamoDecodeLoop(program)
    assert not [n for n in loop.module.graph.nodes
                if n.target is aten.copy_.default and n.args[0].op == "placeholder" and n.args[1].target in (
                    aten.index_copy.default, aten.index_put.default)]
    plain = DynamoDecodeLoop(program)
    plain.module = program.module()  # the functional module: copy of the cache and copy back
    lay_out_for_one_token(plain.module)  # the loop's weight memory: the same sums, bit for bit
    plain.flat_graph = FlatGraph(plain.module)
    assert loop.generate(prompt, 12).tokens == plain.generate(prompt, 12).tokens
    for name, tensor in loop.cache_tensors().items():
        torch.testing.assert_close(tensor, plain.cache_tensors()[name], rtol=0, atol=0)

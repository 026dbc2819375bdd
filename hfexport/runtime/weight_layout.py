"""Linear weights laid out for one-token steps: the Dynamo decode loop's matmuls read them as a row streams.

A decode step multiplies one token's activations by every weight of the model, so on CPU the step is as fast as
the weights stream from memory. ``nn.Linear`` keeps a weight as [out, in]; torch's CPU matmul of a single row by
such a weight (``linear``, i.e. ``x @ W.T``) reads it slower than the same values stored [in, out], the memory of
``W.T`` made contiguous: SmolLM2-135M's shape decodes 1.13x faster so (``python benchmarks/weight_layout.py``). The
tensor keeps its [out, in] shape and its values; only its strides change, so the graph runs unchanged (its sums
run in another order: results move by float32 ulps, tokens stay). A weight
is relaid only when every reader is ``aten.linear`` (as its weight) or ``aten.embedding`` (a table tied to the
head: a lookup reads one strided row per token).

A speed-up (``hfexport.speedups``): the loop's module gets new tensors, the program's own stay as they were (a loop
over an in-memory program holds both layouts while the program lives; one over a saved file, one).
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

_READERS = {torch.ops.aten.linear.default: 1, torch.ops.aten.embedding.default: 0}


def _read_as_weight_only(node: torch.fx.Node) -> bool:
    """Whether every user of ``node`` (none: an unused read) reads it as a linear's weight or an embedding's table."""
    return all(
        user.op == "call_function"
        and user.target in _READERS
        and len(user.args) > _READERS[user.target]
        and user.args[_READERS[user.target]] is node
        and sum(a is node for a in user.args) == 1
        and node not in user.kwargs.values()
        for user in node.users
    )


def _holders(module: torch.nn.Module) -> dict[int, list[tuple[torch.nn.Module, str]]]:
    """id(tensor) -> every (submodule, attribute) that holds it: a tied table has two names."""
    holders: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for owner in module.modules():
        for table in (owner._parameters, owner._buffers):
            for name, tensor in table.items():
                if tensor is not None:
                    holders.setdefault(id(tensor), []).append((owner, name))
    return holders


def lay_out_for_one_token(module: torch.fx.GraphModule) -> int:
    """Relay ``module``'s float linear weights as [in, out] memory (module doc); returns how many it relaid. A
    tensor is relaid only when every graph node that reads it (a tied table may have two) reads it as a weight, and
    every name that holds it gets the new one, so the old memory goes with the program's last reference."""
    holders = _holders(module)
    readers: dict[int, list[torch.fx.Node]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for node in module.graph.nodes:
        if node.op == "get_attr":
            owner_path, _, name = node.target.rpartition(".")
            tensor = getattr(module.get_submodule(owner_path), name)
            if isinstance(tensor, torch.Tensor):
                readers.setdefault(id(tensor), []).append(node)
                tensors[id(tensor)] = tensor
    relaid = 0
    for key, nodes in readers.items():
        tensor = tensors[key]
        if key not in holders or not all(_read_as_weight_only(node) for node in nodes):
            continue
        if not any(user.target is torch.ops.aten.linear.default for node in nodes for user in node.users):
            continue
        if tensor.dim() != 2 or not tensor.is_floating_point() or not tensor.is_contiguous():
            continue
        if tensor.device.type != "cpu":
            continue
        with torch.no_grad():
            laid_out = tensor.detach().t().contiguous().t()
        if isinstance(tensor, torch.nn.Parameter):
            laid_out = torch.nn.Parameter(laid_out, requires_grad=tensor.requires_grad)
        for owner, attribute in holders[key]:
            if isinstance(laid_out, torch.nn.Parameter) and attribute in owner._parameters:
                owner._parameters[attribute] = laid_out
            else:
                owner._buffers[attribute] = laid_out
        relaid += 1
    logger.debug("laid out %d linear weights as [in, out] memory for one-token steps", relaid)
    return relaid

"""ExecuTorch: rotary embeddings' ``rotate_half`` as one matrix product, which XNNPACK runs in its delegate.

Every transformers modeling file with rotary position embeddings defines its own ``rotate_half``: the last axis
cut in halves and put back swapped, one half negated (``cat(-x2, x1)``; GLM's interleaves instead). XNNPACK's
partitioner takes no slice of a tensor with a dynamic axis, so the four slices per decoder layer (query and key)
ran as portable kernels and split the layer's delegate around them.

The function is a signed permutation of the last axis, so it is ``x @ M`` with ``M = rotate_half(I)``: one
nonzero (+1 or -1) per column, written as ``linear(x, M^T)``, XNNPACK's fully connected operator. The product
adds one term ``+-x_k`` to zeros, so it is exact: the same values as the slices for finite inputs. ``M`` is
computed from the modeling file's own function, outside the trace, and checked to be such a permutation that
reproduces the function on a probe; any other function (or dtype) keeps the original.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .registry import register_patch


@contextlib.contextmanager
def _outside_the_trace() -> Iterator[None]:
    """Real tensors, neither faked, functionalised nor recorded, while a trace is under way (a no-op outside one):
    every dispatch mode is set aside, the pre-dispatch tracer's too."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), disable_proxy_modes_tracing():
        yield


def _signed_permutation(original: Callable[[torch.Tensor], torch.Tensor], size: int, dtype: torch.dtype) -> Any:
    """``W`` with ``original(x) == linear(x, W)`` (``W = M^T``) exactly, or None where ``original`` is no signed
    permutation."""
    with _outside_the_trace():
        matrix = original(torch.eye(size, dtype=dtype))
        if matrix.shape != (size, size):
            return None
        nonzero = matrix != 0
        one_per_row_and_column = (nonzero.sum(0) == 1).all() and (nonzero.sum(1) == 1).all()
        if not one_per_row_and_column or not (matrix[nonzero].abs() == 1).all():
            return None
        probe = torch.randn(3, size, generator=torch.Generator().manual_seed(0), dtype=dtype)
        if not torch.equal(original(probe), probe @ matrix):
            return None
        return matrix.T.contiguous()


@register_patch("executorch", "transformers.models.*.rotate_half", speedup=True)
def _rotate_half_as_a_product(original: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """XNNPACK takes no dynamic slice: rotate the halves with one exact matrix product (module doc)."""
    matrices: dict[int, Any] = {}  # float32 weights by head size

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-1]
        if not isinstance(size, int) or x.dtype != torch.float32:
            return original(x)
        if size not in matrices:
            matrices[size] = _signed_permutation(original, size, x.dtype)
        matrix = matrices[size]
        if matrix is None:
            return original(x)
        with _outside_the_trace():
            # A constant of this call's own, on the input's device: EXIR cannot plan one constant read by two
            # delegates (layers).
            weight = matrix.to(device=x.device, copy=True)
        return torch.nn.functional.linear(x, weight)

    return rotate_half

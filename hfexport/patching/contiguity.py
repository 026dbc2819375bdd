"""``Tensor.contiguous()`` and ``torch.matmul`` without a guard on symbolic sizes.

``contiguous()`` returns the tensor itself when it is already contiguous, else a copy, and
decides which with a hard guard on ``is_contiguous()``. For a transposed view such as
whisper's ``q_proj(x).view(b, s, h, d).transpose(1, 2).contiguous()`` that test is
``s == 1``: under torch.export the program then carries ``decoder_input_ids.size()[1] != 1``
and refuses a one-token decode step (or, traced at one token, every longer one).

During export, a tensor whose contiguity depends on symbolic sizes is copied into contiguous
memory instead (same values; only the aliasing differs, which a functional graph does not
observe). Tensors that are contiguous for every size, and tensors with static shapes, go
through the original method, so graphs that did not guard are unchanged.

``torch.matmul`` of two >= 3-D tensors folds their batch axes into one by ``reshape``, a view only when
the memory allows it: for eager attention's ``query @ key.transpose(2, 3)`` over ``view(b, s, h, d)
.transpose(1, 2)`` projections that is again ``s == 1`` (SwitchTransformers, which has no SDPA path,
refused one-token inputs; the reshape's view check guards even where the batch axes fold, as for
``key.transpose(2, 3)`` of a contiguous cache). During export a >= 3-D operand that is not contiguous
for every size is copied into contiguous memory first: one copy of the query and of the transposed key
per eager attention call, the price of a program that serves every query length.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .registry import register_patch


def _symbolic(tensor: torch.Tensor) -> bool:
    return any(isinstance(size, torch.SymInt) for size in tensor.shape)


def known_dense(tensor: torch.Tensor, order: tuple[int, ...]) -> bool:
    """True when the tensor's strides are the dense ones for its dims taken innermost first in ``order``, for every
    value of its symbolic sizes (no guard added; what cannot be proven counts as not dense)."""
    expected: Any = 1
    for dim in order:
        size, stride = tensor.shape[dim], tensor.stride()[dim]
        if statically_known_true(size == 1):
            continue
        if not statically_known_true(stride == expected):
            return False
        expected = expected * size
    return True


def known_contiguous(tensor: torch.Tensor) -> bool:
    """True when the tensor is row-major contiguous for every value of its symbolic sizes (no guard added).

    torch's own ``is_contiguous_or_false`` evaluates backed sizes at their sample value, so a
    one-token sample would read as contiguous and the original method would guard again."""
    return known_dense(tensor, tuple(reversed(range(tensor.dim()))))


def contiguity_guards(tensor: torch.Tensor) -> bool:
    """True when asking whether this tensor is contiguous would guard on its symbolic sizes: the one test both
    patches below copy on."""
    return _symbolic(tensor) and not known_contiguous(tensor)


@register_patch("dynamo", "torch.Tensor.contiguous")
def _patch_contiguous(original: Any) -> Any:
    """Tensor.contiguous() guards on is_contiguous() (a transposed view: query length != 1); copy instead."""

    def contiguous(self: torch.Tensor, memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
        if (
            not isinstance(self, torch.Tensor)
            or memory_format != torch.contiguous_format
            or not contiguity_guards(self)
        ):
            return original(self, memory_format=memory_format)
        return self.clone(memory_format=memory_format)

    return contiguous


@register_patch("dynamo", "torch.matmul")
def _patch_matmul(original: Any) -> Any:
    """torch.matmul of transposed 4-D views (eager attention's query @ key^T) guards query length != 1; copy first."""

    def matmul(input: Any, other: Any, **kwargs: Any) -> Any:
        operands = (input, other)
        if all(isinstance(t, torch.Tensor) and t.dim() >= 3 for t in operands):
            input, other = (
                t.clone(memory_format=torch.contiguous_format) if contiguity_guards(t) else t for t in operands
            )
        return original(input, other, **kwargs)

    return matmul

"""``nn.Module.to()`` inside a forward, when it would change nothing.

Some routers cast themselves on every call (SwitchTransformers' and NLLB-MoE's
``self.classifier = self.classifier.to(self.dtype)``; Bark moves its codec with ``.to(self.device)``).
Eagerly that is a no-op when the module already has that dtype and device, but under torch.export
``Module._apply`` still tries to swap every parameter for its converted copy, and a traced parameter
cannot be swapped: ``RuntimeError: _apply(): Couldn't swap Linear.weight``.

During export, a ``to()`` whose every parameter and buffer already has the requested device and
dtype returns the module untouched, exactly what eager ends up with. Any call that would convert
something, or asks for a memory format, goes through the original method, so a real conversion is
never skipped. Remove when ``torch.export`` traces a same-dtype ``Module.to()`` in a forward.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from .registry import register_patch


def _same_device(have: torch.device, want: torch.device) -> bool:
    return have.type == want.type and (want.index is None or have.index == want.index)


def changes_nothing(module: torch.nn.Module, *args: Any, **kwargs: Any) -> bool:
    """True when ``module.to(*args, **kwargs)`` would leave every parameter and buffer as it is."""
    device, dtype, _non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if memory_format is not None:
        return False
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        return False  # the original raises its own error for these
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if device is not None and not _same_device(tensor.device, torch.device(device)):
            return False
        # Module.to converts only floating-point and complex tensors; integer buffers keep their dtype.
        if dtype is not None and (tensor.is_floating_point() or tensor.is_complex()) and tensor.dtype != dtype:
            return False
    return True


@register_patch("dynamo", "torch.nn.Module.to")
def _patch_module_to(original: Any) -> Any:
    """Module.to() in a forward swaps parameters even when nothing changes, which export cannot; skip no-ops."""

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if changes_nothing(self, *args, **kwargs):
            return self
        return original(self, *args, **kwargs)

    return to

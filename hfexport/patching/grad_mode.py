"""``torch.no_grad()`` inside a forward that is already traced without gradients.

hfexport traces under ``torch.no_grad()``. Modeling code often wraps parts of its forward in ``no_grad`` again
(every rotary embedding's ``forward`` is decorated with ``@torch.no_grad()``), and torch.export records each
switch of the grad mode as a ``set_grad_enabled`` node, even one that switches it to what it already is. After the
trace, torch splits the graph at those nodes into submodules, finds each region's mode equal to the ambient one
and inlines them again, recompiling the graph module for each split, for a graph identical but for node names.

During an export, a ``no_grad`` entered while gradients are already off leaves the mode alone (nothing for the
trace to record), and its exit restores the mode only if it differs; a real switch (``no_grad`` inside an
``enable_grad`` region) goes through torch's own methods. Remove when torch.export skips same-mode switches.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import register_patch


@register_patch("dynamo", "torch.autograd.grad_mode.no_grad.__enter__")
def _patch_no_grad_enter(original: Any) -> Any:
    """A no_grad entered with gradients already off records a no-op grad switch into the trace; skip it."""

    def __enter__(self: torch.no_grad) -> None:
        if not torch.is_grad_enabled():
            self.prev = False
            return
        original(self)

    return __enter__


@register_patch("dynamo", "torch.autograd.grad_mode.no_grad.__exit__")
def _patch_no_grad_exit(original: Any) -> Any:
    """Leaving a no_grad restores the grad mode; when it already is that mode there is nothing to record."""

    def __exit__(self: torch.no_grad, *exc_info: Any) -> None:
        if torch.is_grad_enabled() == self.prev:
            return
        original(self, *exc_info)

    return __exit__

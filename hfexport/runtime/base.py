"""One call shape for every backend: named inputs in, named outputs out.

A runner takes the inputs the eager model takes (tensors, caches, nested outputs)
or their flat named form (``past_key_values.layers.0.keys``), and returns a flat
dict named as ``hfexport.outputs.flatten_named`` names the eager outputs, so a
comparison is a loop over names.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import RunnerInputError
from ..outputs import flatten_named


class Runner(abc.ABC):
    backend: str = ""

    @property
    @abc.abstractmethod
    def input_names(self) -> list[str]:
        """Flat names of the graph inputs, in graph order."""

    @property
    def output_names(self) -> list[str]:
        return []

    @abc.abstractmethod
    def run_flat(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run on flat named inputs (already checked)."""

    def expected_inputs(self) -> dict[str, tuple[tuple[Any, ...], Any]]:
        """name -> (shape with symbols as strings, dtype); empty when the backend cannot say."""
        return {}

    def flatten_inputs(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        flat: dict[str, torch.Tensor] = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                flat[key] = value
            else:
                flat.update(flatten_named(value, key))
        return flat

    def check_inputs(self, flat: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        names = self.input_names
        missing = [n for n in names if n not in flat]
        unknown = [n for n in flat if n not in names]
        if missing or unknown:
            raise RunnerInputError(
                f"{type(self).__name__}: inputs do not match the program. "
                + (f"Missing: {missing}. " if missing else "")
                + (f"Unknown: {unknown}. " if unknown else "")
                + f"The program takes: {names}"
            )
        expected = self.expected_inputs()
        for name in names:
            if name not in expected:
                continue
            shape, dtype = expected[name]
            got = flat[name]
            if len(shape) != got.dim() or any(isinstance(d, int) and d != g for d, g in zip(shape, got.shape)):
                raise RunnerInputError(
                    f"{type(self).__name__}: input {name!r} has shape {tuple(got.shape)}, the program expects "
                    f"{tuple(shape)} (strings are dynamic axes)"
                )
            if dtype is not None and got.dtype != dtype:
                raise RunnerInputError(
                    f"{type(self).__name__}: input {name!r} has dtype {got.dtype}, the program expects {dtype}"
                )
        return {n: flat[n] for n in names}

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, torch.Tensor]:
        merged = {**(dict(inputs) if inputs else {}), **kwargs}
        refuse_window_slot_caches(type(self).__name__, merged)
        return self.run_flat(self.check_inputs(self.flatten_inputs(merged)))


def window_slot_layers(cache: Any) -> dict[int, int]:
    """{layer index: slots} of the layers of ``cache`` that hold only a sliding window (transformers'
    ``StaticSlidingWindowLayer``, what ``generate()`` builds for a static cache)."""
    out = {}
    for index, layer in enumerate(getattr(cache, "layers", None) or []):
        if type(layer).__name__ != "StaticSlidingWindowLayer":
            continue
        keys = getattr(layer, "keys", None)  # None until the layer's first update (a prefill's cache)
        out[index] = int(keys.shape[-2]) if isinstance(keys, torch.Tensor) else int(getattr(layer, "max_cache_len", 0))
    return out


def refuse_window_slot_caches(runner: str, inputs: Mapping[str, Any]) -> None:
    """hfexport's static-cache graphs keep every slot in sliding-window layers and apply the window through the
    mask (``patching.sliding_window``); a cache whose sliding layers hold only the window would be written at other
    slots than the graph's, so it is refused here, naming what to pass, rather than computed wrong or failing on a
    guard."""
    for key, value in inputs.items():
        layers = window_slot_layers(value)
        if layers:
            raise RunnerInputError(
                f"{runner}: the cache {key!r} holds only a sliding window in layers {sorted(layers)} "
                f"({sorted(set(layers.values()))} slots: transformers' StaticSlidingWindowLayer, what generate() "
                "builds for a static cache), while this graph keeps every slot in sliding layers and applies the "
                "window through the mask. Pass a StaticCache built while "
                "hfexport.patching.apply_patches('generation') is active (its sliding layers then keep "
                "max_cache_len slots), or decode with hfexport.runtime.decode.decode_loop / serve generate() with "
                "hfexport.runtime.components.ExportedGenerate, which build that cache."
            )

"""Fault: the static-cache decode graph assumes a cache layout other than the cache object it is given: it writes
each token one slot further on (as if slot 0 were reserved), while the caller's cache and mask count slots from 0.
The suite's static-cache loop must fail it (the logits, and the caller's cache after the same tokens)."""

import contextlib

import torch
from transformers.cache_utils import StaticLayer

from faults._base import each_backend, with_faults


def _shifted_update(self, key_states, value_states, *args, **kwargs):
    if not self.is_initialized:
        self.lazy_initialization(key_states, value_states)
    length = key_states.shape[-2]
    slots = torch.arange(length, device=key_states.device) + self.cumulative_length + 1  # one slot on
    self.cumulative_length.add_(length)
    self.keys.index_copy_(2, slots, key_states)
    self.values.index_copy_(2, slots, value_states)
    return self.keys, self.values


@contextlib.contextmanager
def _shifted_slots():
    original = StaticLayer.__dict__["update"]
    StaticLayer.update = _shifted_update
    try:
        yield
    finally:
        StaticLayer.update = original


class ShiftedCacheSlots:
    def export_for_generation(self, model, inputs, config=None, generation_config=None, multi_token_decode=False):
        from hfexport.utils import decompose_for_generation

        config = self.resolve_config(config)
        components = decompose_for_generation(model, inputs, generation_config, multi_token_decode)
        out = {}
        for name, (module, kwargs) in components.items():
            with _shifted_slots() if name == "decode" else contextlib.nullcontext():
                out[name] = self.export(module, kwargs, config)
        return out


with_faults(globals(), exporters=each_backend(ShiftedCacheSlots))

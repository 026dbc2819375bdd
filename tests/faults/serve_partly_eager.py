"""Fault: the implementation's own serving runs its artifacts for two tokens, then eager ``generate()`` for all."""

import copy
import types

import torch

import hfexport.runtime.components as components_module
from hfexport.generation import _generation_config

from faults._base import runtime_with, with_faults


class PartlyEager(components_module.ExportedGenerate):
    def generate(self, inputs, max_new_tokens=16, generation_config=None):
        super().generate(inputs, 2, None)  # every artifact runs, so none is idle
        config = _generation_config(self.model, generation_config, max_new_tokens)
        with torch.no_grad():
            out = self.model.generate(**copy.deepcopy(dict(inputs)), generation_config=config)
        return components_module._new_tokens(out, max_new_tokens)


runtime = runtime_with()
runtime.components = types.SimpleNamespace(**{**vars(components_module), "ExportedGenerate": PartlyEager})
with_faults(globals(), runtime=runtime)

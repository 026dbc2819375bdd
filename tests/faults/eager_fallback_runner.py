"""Fault: the export is static, and the runner hides it by running the eager model (pickled beside the
artifact) whenever the artifact refuses an input."""

import dataclasses
import types

import torch

import hfexport.runtime

from faults._base import each_backend, with_faults

_MODELS: dict[int, torch.nn.Module] = {}


class StaticWithEagerCopy:
    def export(self, model, sample_inputs, config=None):
        config = self.resolve_config(config)
        program = super().export(model, sample_inputs, dataclasses.replace(config, dynamic=False))
        _MODELS[id(program)] = model
        return program

    def save(self, program, path):
        super().save(program, path)
        torch.save(_MODELS[id(program)], f"{path}.eager")


def load(path):
    artifact = hfexport.runtime.load(path)
    eager = torch.load(f"{path}.eager", weights_only=False)

    def run(*args, **kwargs):
        try:
            return artifact(*args, **kwargs)
        except Exception:
            with torch.no_grad():
                return eager(*args, **kwargs)

    return run


with_faults(globals(), exporters=each_backend(StaticWithEagerCopy),
            runtime=types.SimpleNamespace(**{**vars(hfexport.runtime), "load": load}))

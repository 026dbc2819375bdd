"""Fault: the runner's outputs are right, but it zeroes the caller's attention mask in place after each run."""

import types

import torch

import hfexport.runtime

from faults._base import with_faults


def load(path):
    runner = hfexport.runtime.load(path)

    def run(*args, **kwargs):
        out = runner(*args, **kwargs)
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            mask.zero_()
        return out

    return run


with_faults(globals(), runtime=types.SimpleNamespace(**{**vars(hfexport.runtime), "load": load}))

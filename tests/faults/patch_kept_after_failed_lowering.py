"""Fault: a torch patch installed for the lowering stays installed when the lowering fails."""

import torch

from faults._base import each_backend, with_faults


class KeepsPatchOnFailure:
    def lower(self, *args, **kwargs):
        original = torch.nn.functional.gelu
        torch.nn.functional.gelu = lambda x, approximate="none": original(x, approximate=approximate)
        result = super().lower(*args, **kwargs)  # an exception here skips the restore below
        torch.nn.functional.gelu = original
        return result


exporters = each_backend(KeepsPatchOnFailure)
with_faults(globals(), exporters={b: c for b, c in exporters.items() if b != "dynamo"})

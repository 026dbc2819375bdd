"""Fault: config.to_dict() drops prefer_deferred_runtime_asserts_over_guards (it comes back as its default)."""

from dataclasses import dataclass

import hfexport

from faults._base import with_faults


def lossy(cls):
    @dataclass(eq=False)
    class Lossy(cls):
        def to_dict(self):
            data = super().to_dict()
            data.pop("prefer_deferred_runtime_asserts_over_guards", None)
            return data

    Lossy.__name__ = cls.__name__
    return Lossy


CONFIGS = {"dynamo": lossy(hfexport.DynamoConfig), "onnx": lossy(hfexport.OnnxConfig),
           "executorch": lossy(hfexport.ExecutorchConfig)}
with_faults(globals(), configs=CONFIGS)

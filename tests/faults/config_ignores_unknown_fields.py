"""Fault: configs drop fields they do not know (a misspelt ``dynamik=True`` exports static without a word)."""

import dataclasses

import hfexport

from faults._base import with_faults


def _lenient(cls):
    class Lenient(cls):
        @classmethod
        def from_dict(cls_, data):
            known = {f.name for f in dataclasses.fields(cls)}
            return cls.from_dict({k: v for k, v in dict(data).items() if k in known})

    Lenient.__name__ = cls.__name__
    return Lenient


with_faults(globals(), configs={"dynamo": _lenient(hfexport.DynamoConfig), "onnx": _lenient(hfexport.OnnxConfig),
                                "executorch": _lenient(hfexport.ExecutorchConfig)})

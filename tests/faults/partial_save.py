"""Fault: artifacts are written straight to their final path: a failed save leaves a partial file."""

from pathlib import Path

import torch

from faults._base import each_backend, with_faults


class WritesInPlace:
    @classmethod
    def save(cls, program, path, *args, **kwargs):
        if cls.file_suffix == ".pt2":
            torch.export.save(program, str(path))
            return [str(path)]
        if cls.file_suffix == ".onnx":
            import onnx_ir as ir

            ir.save(getattr(program, "model", program), Path(path))
            return [str(path)]
        with open(path, "wb") as f:
            program.write_to_file(f)
        return [str(path)]


with_faults(globals(), exporters=each_backend(WritesInPlace))

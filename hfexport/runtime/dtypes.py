"""The runtimes' element types as torch dtypes: what the runners need to check and build their inputs.

The library keeps its own tables (the judge keeps its own in ``pytest_hfexport.runtime_types``): the library
imports nothing of the plugin that judges it.
"""

from __future__ import annotations

from typing import Any

import torch

# ONNX Runtime's type strings (``NodeArg.type``).
ORT_TYPES: dict[str, torch.dtype] = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(bfloat16)": torch.bfloat16,
    "tensor(double)": torch.float64,
    "tensor(int64)": torch.int64,
    "tensor(int32)": torch.int32,
    "tensor(int16)": torch.int16,
    "tensor(int8)": torch.int8,
    "tensor(uint8)": torch.uint8,
    "tensor(bool)": torch.bool,
}

# ExecuTorch's ScalarType codes (runtime/core/portable_type/scalar_type.h).
EXECUTORCH_TYPES: dict[int, torch.dtype] = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    11: torch.bool,
    15: torch.bfloat16,
}


def from_ort(type_string: str) -> torch.dtype | None:
    """``tensor(float)`` -> torch.float32; None for a type torch has no dtype for."""
    return ORT_TYPES.get(type_string)


def from_executorch(tensor_info: Any) -> torch.dtype | None:
    """An ExecuTorch ``TensorInfo``'s scalar type -> torch dtype; None for a type torch has no dtype for."""
    code = tensor_info.dtype()
    return EXECUTORCH_TYPES.get(int(getattr(code, "value", code)))

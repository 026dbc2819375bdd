"""Element types of the runtimes the judge drives directly, as torch dtypes."""

from __future__ import annotations

from typing import Any


def ort_dtype(type_string: str) -> Any:
    """ONNX Runtime's ``tensor(float)``-style type string -> torch dtype."""
    import torch

    table = {
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
    if type_string not in table:
        raise TypeError(f"no torch dtype for ONNX Runtime type {type_string!r}")
    return table[type_string]


def executorch_dtype(tensor_info: Any) -> Any:
    """An ExecuTorch ``TensorInfo``'s scalar type (runtime/core/portable_type/scalar_type.h codes) -> torch dtype."""
    import torch

    table = {
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
    code = tensor_info.dtype()
    code = int(getattr(code, "value", code))
    if code not in table:
        raise TypeError(f"no torch dtype for ExecuTorch scalar type {code}")
    return table[code]

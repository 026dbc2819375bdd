"""The one comparison judges an output's dtype, not only its values: a float32 output returned as float64 or
float16 is a different output (memory, precision downstream) even where every value agrees."""

import pytest
import torch

from pytest_hfexport.compare import compare


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_a_float32_output_in_another_float_dtype_fails(dtype):
    expected = {"logits": torch.tensor([[0.5, -1.0, 2.0]])}
    result = compare(expected, {"logits": expected["logits"].to(dtype)}, "dynamo")
    assert not result.ok
    assert "dtype" in result.outputs["logits"].note and "float32" in result.outputs["logits"].note


def test_equal_dtypes_and_integer_widths_still_pass():
    expected = {"logits": torch.tensor([[0.5, -1.0]]), "ids": torch.tensor([[1, 2]], dtype=torch.int64)}
    got = {"logits": expected["logits"].clone(), "ids": expected["ids"].to(torch.int32)}
    assert compare(expected, got, "onnx").ok


def test_a_different_kind_of_dtype_fails_even_with_equal_values():
    expected = {"mask": torch.tensor([[1, 0]], dtype=torch.int64)}
    assert not compare(expected, {"mask": expected["mask"].bool()}, "dynamo").ok

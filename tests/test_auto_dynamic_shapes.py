"""dynamic=True marks the batch and query axes of a size-1 sample dynamic, wherever the input keeps them."""

import torch
from torch.export import Dim

from hfexport.shapes import auto_dynamic_shapes


def test_batch_and_query_axes_of_a_size_one_sample_are_dynamic():
    spec = auto_dynamic_shapes(
        {
            "input_ids": torch.zeros(1, 1, dtype=torch.long),
            "attention_mask": torch.zeros(1, 1, 1, 8, dtype=torch.bool),  # [batch, heads, query, keys]
            "position_ids": torch.zeros(3, 1, 1, dtype=torch.long),  # M-RoPE: [sections, batch, query]
        }
    )
    assert spec["input_ids"] == {0: Dim.AUTO, 1: Dim.AUTO}
    assert spec["attention_mask"] == {0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO}  # the head axis broadcasts
    assert spec["position_ids"] == {0: Dim.AUTO, 1: Dim.AUTO, 2: Dim.AUTO}  # batch is axis 1 here


def test_two_dimensional_position_ids_keep_batch_on_axis_zero():
    assert auto_dynamic_shapes({"position_ids": torch.zeros(1, 1, dtype=torch.long)})["position_ids"] == {
        0: Dim.AUTO,
        1: Dim.AUTO,
    }

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


def test_token_inputs_of_one_batch_share_one_batch_symbol():
    from hfexport.shapes import tie_batch_axes

    inputs = {
        "input_ids": torch.zeros(2, 3, dtype=torch.long),
        "attention_mask": torch.ones(2, 7, dtype=torch.long),
        "position_ids": torch.zeros(3, 2, 3, dtype=torch.long),  # M-RoPE: batch on axis 1
        "token_type_ids": torch.zeros(1, 3, dtype=torch.long),  # another batch: left alone
        "pixel_values": torch.zeros(2, 3, 4, 4),  # not a token input: left alone
    }
    spec = tie_batch_axes(auto_dynamic_shapes(inputs), inputs)
    batch = spec["input_ids"][0]
    assert batch is not Dim.AUTO and spec["attention_mask"][0] is batch and spec["position_ids"][1] is batch
    assert spec["position_ids"][0] is Dim.AUTO and spec["input_ids"][1] is Dim.AUTO
    assert spec["token_type_ids"][0] is Dim.AUTO and spec["pixel_values"][0] is Dim.AUTO


def test_a_lone_token_input_keeps_its_auto_batch():
    from hfexport.shapes import tie_batch_axes

    inputs = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "pixel_values": torch.zeros(2, 3, 4, 4)}
    spec = auto_dynamic_shapes(inputs)
    assert tie_batch_axes(spec, inputs) == spec

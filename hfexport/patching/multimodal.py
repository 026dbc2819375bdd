"""Vision-language models whose glue between the vision encoder and the language model pins the image count.

LLaVA's ``get_image_features`` returns its projected features as ``list(features)``, one
``[patches, hidden]`` tensor per image. Iterating a tensor needs a concrete length, so torch.export
specialises the image axis of ``pixel_values`` to the sample's count (``pixel_values.size()[0] == 1``)
and the artifact refuses a second image. The only consumer inside ``forward`` concatenates the list
again, so the patch hands back one ``[images * patches, hidden]`` tensor instead: same features, same
order, and the image axis stays symbolic. The projector's input (the features with the CLS row sliced
off) is made contiguous first, since flattening that strided view for a linear layer guards on one
image too. It can go once the modeling code keeps the features batched.

Qwen2-VL splits its features per image with ``split_sizes.tolist()`` read from ``image_grid_thw``
(data-dependent sizes, and as many chunks as images): the same one-chunk answer applies. Its
language model takes M-RoPE positions that ``get_rope_index`` builds row by row with
``itertools.groupby`` over ``mm_token_type_ids.tolist()`` and a Python walk over the grids: no
trace survives that. ``mrope_positions`` computes the same positions and deltas with cumulative
sums and gathers over the token axis, inside the graph, so the artifact takes the processor's
inputs (input_ids, attention_mask, mm_token_type_ids, pixel_values, image_grid_thw) for any
number of rows and images, like eager.

For ExecuTorch only: the placeholder-count checks (``torch_compilable_check`` on a tensor) trace to
``aten._is_all_true``, which is outside the core ATen opset ExecuTorch verifies against; a scalar
check states the same condition with ops it lowers.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import register_patch


def _contiguous_features(module: torch.nn.Module, args: tuple) -> tuple:
    """The projector's input is the vision features with the CLS row sliced off: a strided view whose
    flattening for the linear layer would guard on a single image. A contiguous copy flattens freely
    (under export ``Tensor.contiguous`` copies without a guard, see ``patching.contiguity``)."""
    return tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)


def _flatten_images(module: torch.nn.Module, args: Any, output: Any) -> Any:
    """Projector output [images, patches, hidden] -> [1, images * patches, hidden]: one list entry, same rows."""
    if isinstance(output, torch.Tensor) and output.dim() == 3:
        return output.reshape(1, -1, output.shape[-1])
    return output


def _image_features_in_one_tensor(original):
    """LLaVA's get_image_features iterates its batch of features (list(tensor)): that pins the image count."""

    def get_image_features(self, *args, **kwargs):
        projector = getattr(self, "multi_modal_projector", None)
        if kwargs.get("image_sizes") is not None or not isinstance(projector, torch.nn.Module):
            return original(self, *args, **kwargs)  # features split by image size: not this pattern
        handles = [
            projector.register_forward_pre_hook(_contiguous_features),
            projector.register_forward_hook(_flatten_images),
        ]
        try:
            return original(self, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    return get_image_features


register_patch(
    "dynamo",
    "transformers.models.llava.modeling_llava.LlavaModel.get_image_features",
    reason="LLaVA returns image features as list(tensor), which pins the image count; one flattened tensor instead",
)(_image_features_in_one_tensor)


def _features_in_one_chunk(original):
    """Qwen2-VL splits vision features per image with grid_thw-derived .tolist() sizes; one chunk instead."""

    def get_features(self, pixel_values, grid_thw=None, **kwargs):
        visual = getattr(self, "visual", None)
        if not isinstance(visual, torch.nn.Module) or any(k.startswith(("image_", "video_")) for k in kwargs):
            return original(self, pixel_values, grid_thw, **kwargs)  # precomputed encoder inputs: left alone
        return_dict = kwargs.pop("return_dict", True)
        outputs = visual(pixel_values.type(visual.dtype), grid_thw=grid_thw, **kwargs)
        outputs.pooler_output = (outputs.pooler_output,)  # the caller concatenates the chunks
        return outputs if return_dict else outputs.to_tuple()

    return get_features


register_patch(
    "dynamo",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_image_features",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_video_features",
    reason="Qwen2-VL splits vision features with grid_thw-derived .tolist() sizes; one chunk, concatenated anyway",
)(_features_in_one_chunk)


def mrope_positions(
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    grids: dict[int, torch.Tensor | None],
    attention_mask: torch.Tensor | None,
    merge: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2-VL's M-RoPE (position_ids [3, batch, seq], deltas [batch, 1]) with no data-dependent shape or branch.

    ``grids`` maps a token type (1 image, 2 video) to its [items, 3] (t, h, w) grid. Over the attended
    tokens of a row, a text token's position is its index there plus the shift of every vision item
    before it (an item of n tokens advances the position by max(h, w) / merge, not n). A vision
    token's three positions are its item's start plus its (frame, row, column) in the merged grid.
    Items are taken in order over the whole batch, as eager takes them; padded tokens get 0.
    """
    batch, length = input_ids.shape
    attended = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
    index = attended.long().cumsum(-1) - 1  # position among the row's attended tokens
    shift_at_end = torch.zeros_like(index)  # an item's shift, on its last token
    items = []
    for token_type, grid in grids.items():
        if grid is None:
            continue
        grid = grid.to(torch.long)
        is_item = (mm_token_type_ids == token_type) & attended
        rank = is_item.reshape(-1).long().cumsum(0).reshape(batch, length) - 1  # over the batch, row-major
        frames, rows, cols = grid[:, 0], grid[:, 1] // merge, grid[:, 2] // merge
        sizes = frames * rows * cols
        starts = F.pad(sizes.cumsum(0), (1, 0))
        item = (rank[..., None] >= starts[1:]).sum(-1).clamp(max=grid.shape[0] - 1)
        offset = rank - starts[item]
        advance = torch.maximum(grid[:, 1], grid[:, 2]) // merge
        last = is_item & (offset == sizes[item] - 1)
        shift_at_end = shift_at_end + torch.where(last, advance[item] - sizes[item], 0)
        items.append((is_item, offset, rows[item], cols[item]))
    shift = shift_at_end.cumsum(-1) - shift_at_end  # items that ended before each token
    text = index + shift
    positions = text[None].expand(3, batch, length)
    for is_item, offset, rows, cols in items:
        start = text - offset
        plane = rows * cols
        vision = torch.stack([start + offset // plane, start + (offset % plane) // cols, start + offset % cols])
        positions = torch.where(is_item[None], vision, positions)
    positions = torch.where(attended[None], positions, 0).to(input_ids.dtype)
    highest = torch.where(attended[None], positions, torch.iinfo(positions.dtype).min).amax(dim=(0, 2))
    deltas = (highest + 1 - attended.sum(-1)).unsqueeze(1)
    return positions, deltas


def _rope_index_in_graph(original):
    """Qwen2-VL's get_rope_index walks mm_token_type_ids.tolist() and the grids in Python; computed in-graph."""

    def get_rope_index(
        self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None, **kwargs
    ):
        merge = getattr(getattr(self.config, "vision_config", None), "spatial_merge_size", None)
        if not isinstance(merge, int) or kwargs or (attention_mask is not None and attention_mask.dim() != 2):
            return original(
                self, input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask, **kwargs
            )
        grids = {1: image_grid_thw, 2: video_grid_thw}
        return mrope_positions(input_ids, mm_token_type_ids, grids, attention_mask, merge)

    return get_rope_index


register_patch(
    "dynamo",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_rope_index",
    reason="Qwen2-VL's get_rope_index groups mm_token_type_ids.tolist() in Python; cumulative sums in the graph",
)(_rope_index_in_graph)


def _placeholder_check_as_scalar(original):
    """transformers checks placeholder/feature counts with torch._check_tensor_all: aten._is_all_true, not core ATen.

    The check compares a token count (a tensor) with the feature count; as a scalar check it becomes a runtime
    assertion ExecuTorch lowers, and it tells the trace that the two counts agree.
    """

    def torch_compilable_check(cond, msg, error_type=ValueError):
        if isinstance(cond, torch.Tensor) and cond.numel() == 1:
            torch._check(cond.to(torch.int64).item() == 1)
            return None
        return original(cond, msg, error_type)

    return torch_compilable_check


register_patch(
    "executorch",
    "transformers.models.llava.modeling_llava.torch_compilable_check",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.torch_compilable_check",
    reason="VLM placeholder checks trace to aten._is_all_true, which ExecuTorch's core ATen verifier refuses; "
    "a scalar check instead",
)(_placeholder_check_as_scalar)

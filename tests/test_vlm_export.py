"""Vision-language models exported on a one-image, one-row sample serve other image counts, sizes and batches.

LLaVA (a fixed count of tokens per image) and Qwen2-VL (a patch grid per image, M-RoPE positions derived
from the grids and the token types) are traced on the zoo's batch-1 sample; every artifact is then run on
inputs the trace never saw and compared with eager transformers.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from helpers import assert_matches, eager, zoo_model
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids

from conformance.zoo.entries_vlm import QWEN2VL_TOKENS
from hfexport import DynamoConfig, DynamoExporter, ExecutorchConfig, ExecutorchExporter
from hfexport.generation import decompose_for_generation
from hfexport.patching import apply_patches
from hfexport.patching.multimodal import mrope_positions
from hfexport.patching.registry import resolve_owner
from hfexport.patching.vision import vision_patch_layout
from hfexport.runtime import runner_for

ATOL = 1e-5
IMAGE, START, END = (
    QWEN2VL_TOKENS["image_token_id"],
    QWEN2VL_TOKENS["vision_start_token_id"],
    QWEN2VL_TOKENS["vision_end_token_id"],
)


def _export(model, inputs):
    return DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))


@pytest.fixture(scope="module")
def llava():
    entry, model = zoo_model("llava")
    model.eval()
    return entry, model, _export(model, entry.sample_inputs(model))


@pytest.fixture(scope="module")
def qwen2_vl():
    entry, model = zoo_model("qwen2_vl")
    model.eval()
    return entry, model, _export(model, entry.sample_inputs(model))


def _qwen2_vl_rows(rows: list[list], length: int) -> dict[str, torch.Tensor]:
    """Left-padded Qwen2-VL inputs: each row lists text tokens (int) and images ((h, w) patch grid, one frame)."""
    ids, mask, grids = [], [], []
    for row in rows:
        tokens: list[int] = []
        for part in row:
            if isinstance(part, tuple):
                grids.append([1, *part])
                tokens += [START] + [IMAGE] * (part[0] * part[1] // 4) + [END]  # 2 x 2 patches merge into a token
            else:
                tokens.append(part)
        ids.append([0] * (length - len(tokens)) + tokens)
        mask.append([0] * (length - len(tokens)) + [1] * len(tokens))
    input_ids, grid = torch.tensor(ids), torch.tensor(grids)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.tensor(mask),
        "mm_token_type_ids": (input_ids == IMAGE).long(),
        "pixel_values": torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 4 * 4),
        "image_grid_thw": grid,
    }


# -- LLaVA ----------------------------------------------------------------------------------------------------


def test_llava_traced_on_one_image_serves_a_batch_of_two_images(llava):
    """get_image_features returns list(features): without the patch the image axis is pinned to the sample's 1."""
    entry, model, program = llava
    inputs = entry.input_sets(model, ("batch",))["batch"]
    assert inputs["pixel_values"].shape[0] == 2
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=ATOL)


def test_llava_projector_and_lm_head_components_serve_two_rows():
    """The projector and the LM head are called on slices (CLS row dropped, last position); traced on those
    strided samples their batch was pinned to 1. Traced on row-major copies, they serve strided batch-2 calls."""
    entry, model = zoo_model("llava")
    model.eval()
    components = decompose_for_generation(model, entry.sample_inputs(model))
    wide = torch.randn(2, 17, model.config.vision_config.hidden_size)[:, 1:]  # strided, as the tower's output
    last = torch.randn(2, 5, model.config.text_config.hidden_size)[:, -1:]
    for name, call in (("multi_modal_projector", {"image_features": wide}), ("lm_head", {"input": last})):
        module, sample = components[name]
        program = _export(module, sample)
        assert_matches(eager(module, call), program.module()(**call), "dynamo", tolerance=ATOL, label=name)


# -- Qwen2-VL -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        [[5, (4, 4), 7], [6, (4, 4), 8, 9]],  # one image per row, padding
        [[5, (4, 4), 7, (4, 6), 9], [6, (6, 4), 8]],  # sizes the sample never had, two images in a row
    ],
    ids=["two-rows", "three-images"],
)
def test_qwen2_vl_traced_on_one_image_serves_other_images_and_rows(qwen2_vl, rows):
    """M-RoPE positions are data dependent (get_rope_index walks token types and grids in Python): the export
    failed outright. In-graph positions follow the grids and the padding of each call."""
    entry, model, program = qwen2_vl
    inputs = _qwen2_vl_rows(rows, 24)
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=ATOL)


def test_mrope_positions_equal_get_rope_index_with_padding_and_videos():
    """The loop-free positions equal transformers' get_rope_index: images and videos (t > 1), left padding."""
    entry, model = zoo_model("qwen2_vl")
    video = QWEN2VL_TOKENS["video_token_id"]
    rows = [
        [5, START] + [IMAGE] * 4 + [END, 7, START] + [IMAGE] * 6 + [END, 9, START] + [video] * 8 + [END],
        [0] * 13 + [5, START] + [IMAGE] * 4 + [END, 8, 9, 10, 11, 12, 13, 14],
    ]
    ids = torch.tensor(rows)
    mask = (torch.arange(ids.shape[1])[None] >= torch.tensor([[0], [13]])).long()
    types = (ids == IMAGE).long() + 2 * (ids == video).long()
    images, videos = torch.tensor([[1, 4, 4], [1, 4, 6], [1, 4, 4]]), torch.tensor([[2, 4, 4]])
    for attention_mask in (mask, None):
        expected = model.model.get_rope_index(ids, types, images, videos, attention_mask)
        got = mrope_positions(ids, types, {1: images, 2: videos}, attention_mask, 2)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_vision_patch_layout_equals_the_encoders_helpers():
    for grid in ([[1, 4, 4]], [[1, 4, 4], [1, 4, 6]], [[2, 4, 4], [1, 6, 2], [3, 2, 2]]):
        grid_thw = torch.tensor(grid)
        positions, cu_seqlens = vision_patch_layout(grid_thw, int(grid_thw.prod(-1).sum()), 2)
        assert torch.equal(positions, get_vision_position_ids(grid_thw, 2))
        segments = get_vision_cu_seqlens(grid_thw)
        assert cu_seqlens[: len(segments)].tolist() == segments.tolist()
        assert set(cu_seqlens[len(segments) :].tolist()) <= {int(segments[-1])}  # empty trailing segments


def test_qwen2_vl_vision_encoder_exported_alone_serves_several_images():
    """The encoder is a generation component exported as the top module: its own patched forward must apply
    (patches go in before the exporter binds the forward), and its grid_thw axis must stay symbolic."""
    entry, model = zoo_model("qwen2_vl")
    model.eval()
    encoder = model.model.visual
    program = _export(encoder, {"hidden_states": torch.randn(16, 96), "grid_thw": torch.tensor([[1, 4, 4]])})
    grid = torch.tensor([[1, 4, 4], [1, 4, 6], [2, 2, 4]])
    call = {"hidden_states": torch.randn(int(grid.prod(-1).sum()), 96), "grid_thw": grid}
    assert_matches(eager(encoder, call), program.module()(**call), "dynamo", tolerance=ATOL)


# -- ExecuTorch ----------------------------------------------------------------------------------------------


def _targets(program) -> set[str]:
    return {str(node.target) for node in program.graph.nodes if node.op == "call_function"}


def test_executorch_trace_checks_placeholder_counts_with_core_aten_ops():
    """transformers' placeholder check traces to aten._is_all_true, which ExecuTorch's verifier refuses."""
    entry, model = zoo_model("llava")
    model.eval()
    program = ExecutorchExporter().trace(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    assert "aten._is_all_true.default" not in _targets(program)


def test_executorch_patch_embedding_is_a_linear_with_the_convolutions_numbers():
    """ExecuTorch's portable kernels have no 3-D convolution: Qwen2-VL's patchify Conv3d is traced as a linear."""
    entry, model = zoo_model("qwen2_vl")
    embed = model.model.visual.patch_embed.eval()
    patches = torch.randn(40, 96)
    with apply_patches("executorch"):
        program = torch.export.export(embed, (patches,))
        torch.testing.assert_close(embed(patches), eager(embed, {"hidden_states": patches}), rtol=0, atol=ATOL)
    assert not any("conv" in target for target in _targets(program))  # aten.conv3d / aten.convolution


@pytest.mark.hfexport_slow
def test_executorch_llava_traced_on_one_image_serves_two():
    entry, model = zoo_model("llava")
    model.eval()
    exporter = ExecutorchExporter()
    program = exporter.export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    inputs = entry.input_sets(model, ("batch",))["batch"]
    assert_matches(eager(model, inputs), runner_for(program, "executorch")(**inputs), "executorch")


# -- patch hygiene --------------------------------------------------------------------------------------------

VLM_PATCHED = (
    "transformers.models.llava.modeling_llava.LlavaModel.get_image_features",
    "transformers.models.llava.modeling_llava.torch_compilable_check",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.torch_compilable_check",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.PatchEmbed.forward",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_image_features",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_video_features",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLModel.get_rope_index",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel.forward",
)


def _current(path):
    owner, name = resolve_owner(path)
    return owner.__dict__.get(name)


def test_vlm_patches_are_installed_only_during_export_and_restored_after_a_failure():
    import importlib

    # Modeling code is patched where it is loaded (a caller exporting llava has imported its modeling module).
    for module in ("transformers.models.llava.modeling_llava", "transformers.models.qwen2_vl.modeling_qwen2_vl"):
        importlib.import_module(module)
    before = {path: _current(path) for path in VLM_PATCHED}
    with pytest.raises(RuntimeError, match="boom"), apply_patches("dynamo", "executorch"):
        assert all(_current(path) is not before[path] for path in VLM_PATCHED)
        raise RuntimeError("boom")
    assert {path: _current(path) for path in VLM_PATCHED} == before
    assert transformers.LlavaModel.get_image_features is before[VLM_PATCHED[0]]


def test_flattened_patches_are_bounded_per_image_not_as_a_batch():
    """qwen2_vl's pixel_values are [patches, features]: ExecuTorch plans the patch axis for max_batch images of
    the sample's size (planned as a batch it refused two images; planned as a sequence it did not load)."""
    from torch.export import Dim

    from hfexport.dim_bounds import batch_symbols_of, bound_dynamic_dims

    class Patches(torch.nn.Module):
        def forward(self, pixel_values, input_ids):
            return pixel_values.sum(-1).sum() + input_ids.float().sum()

    sample = {"pixel_values": torch.randn(16, 12), "input_ids": torch.ones(2, 5, dtype=torch.long)}
    program = torch.export.export(
        Patches(), (), sample,
        dynamic_shapes={"pixel_values": {0: Dim.AUTO}, "input_ids": {0: Dim.AUTO, 1: Dim.AUTO}},
    )
    patches, batch = batch_symbols_of(program, patches=True), batch_symbols_of(program)
    assert len(patches) == 1 and len(batch) == 1 and not patches & batch
    bounds = bound_dynamic_dims(program, sample, None, max_batch=8, max_length=64)
    assert bounds[str(next(iter(patches)))][1] == 8 * 16
    assert bounds[str(next(iter(batch)))][1] == 8

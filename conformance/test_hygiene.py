"""After every export, successful or failed, the model is exactly as it was and no patch is left behind."""

import pytest
import torch

from conformance.conftest import entry_params
from hfexport.model_state import diff_model_state, snapshot_model
from hfexport.patching import PATCHES
from hfexport.patching.registry import resolve_owner


def _patch_targets():
    out = {}
    for patches in PATCHES.values():
        for patch in patches:
            resolved = resolve_owner(patch.path)
            if resolved is not None:
                owner, name = resolved
                out[patch.path] = getattr(owner, "__dict__", {}).get(name, "<inherited>")
    return out


# A dense, an MoE, an encoder-decoder and a VLM whose plain export fails: failure must be as clean as success.
@pytest.mark.parametrize("entry", entry_params("hygiene", names=("llama", "qwen3_moe", "t5", "qwen2_vl")))
def test_model_and_patches_unchanged_after_export(entry, hfexport_implementation, hfexport_backend):
    model = entry.model()
    inputs = entry.sample_inputs(model)
    snap, targets = snapshot_model(model), _patch_targets()
    exporter = hfexport_implementation.exporter(hfexport_backend)
    try:
        hfexport_implementation.export(exporter, model, inputs, hfexport_implementation.config(hfexport_backend, dynamic=True))
    except Exception:
        pass  # failed exports must be as clean as successful ones
    assert diff_model_state(model, snap) == []
    assert _patch_targets() == targets


def test_failed_export_restores_everything(hfexport_implementation, hfexport_backend, monkeypatch):
    from conformance.zoo import get

    entry = get("llama")
    model = entry.model()
    snap, targets = snapshot_model(model), _patch_targets()

    def boom(self, *args, **kwargs):
        raise RuntimeError("injected failure during tracing")

    monkeypatch.setattr(type(model.model.layers[0].mlp), "forward", boom)
    exporter = hfexport_implementation.exporter(hfexport_backend)
    with pytest.raises(Exception, match="injected failure"):
        hfexport_implementation.export(exporter, model, entry.sample_inputs(model),
                                       hfexport_implementation.config(hfexport_backend, dynamic=True))
    monkeypatch.undo()
    assert diff_model_state(model, snap) == []
    assert _patch_targets() == targets

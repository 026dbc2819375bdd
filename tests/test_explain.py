"""``hfexport explain MODEL ARTIFACT``: the judge's command names the first module where an artifact diverges.

The command comes from ``pytest_hfexport`` through the entry-point group ``hfexport.commands``; here it runs as a
user runs it, through ``hfexport``'s own ``main``."""

from __future__ import annotations

import torch
import transformers

import hfexport
from hfexport import cli
from hfexport.cli.inputs import sample_inputs


def _llama(folder):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder).eval()


def _export(model, path, fault=None):
    torch.manual_seed(0)
    inputs = sample_inputs(model, 1, 8, False)  # what 'hfexport export' and 'explain' trace on by default
    handle = model.get_submodule(fault).register_forward_hook(lambda m, a, out: out * 1.02) if fault else None
    try:
        program = hfexport.DynamoExporter().export(model, inputs, config=hfexport.DynamoConfig(dynamic=True))
    finally:
        if handle is not None:
            handle.remove()
    hfexport.DynamoExporter.save(program, str(path))


def test_explain_names_the_module_a_fault_perturbed(tmp_path, capsys):
    model = _llama(tmp_path / "model")
    _export(model, tmp_path / "model.pt2", fault="model.layers.1.mlp")
    code = cli.main(["explain", str(tmp_path / "model"), str(tmp_path / "model.pt2"), "-q"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "output 'logits'" in out and "first diverging module: model.layers.1.mlp (LlamaMLP)" in out, out
    assert "last matching module: model.layers.1.mlp.down_proj" in out, out


def test_explain_of_a_matching_artifact_says_there_is_nothing_to_explain(tmp_path, capsys):
    model = _llama(tmp_path / "model")
    _export(model, tmp_path / "model.pt2")
    code = cli.main(["explain", str(tmp_path / "model"), str(tmp_path / "model.pt2"), "-q"])
    out = capsys.readouterr().out
    assert code == 0 and "matches eager on its sample inputs (dynamo): nothing to explain" in out, out


def test_explain_refuses_a_file_that_is_no_artifact(tmp_path, capsys):
    model_dir = tmp_path / "model"
    _llama(model_dir)
    code = cli.main(["explain", str(model_dir), str(model_dir / "config.json"), "-q"])
    assert code == 2 and "is not a .pt2, .onnx or .pte file" in capsys.readouterr().err

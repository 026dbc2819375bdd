"""After any export, successful or failed, the model, the inputs and every patched class are as before."""

import copy

import pytest
import torch
import transformers

from hfexport import DynamoConfig, DynamoExporter, HfExportError
from hfexport.model_state import diff_model_state, snapshot_model
from hfexport.patching import PATCHES, register_patch
from hfexport.patching.registry import apply_patches, resolve_owner
from pytest_hfexport.process_state import torch_switches

from helpers import zoo_model


def _patched_values():
    out = {}
    for backend, patches in PATCHES.items():
        for p in patches:
            resolved = resolve_owner(p.path)
            if resolved:
                owner, name = resolved
                out[p.path] = (owner.__dict__.get(name, "<inherited>") if hasattr(owner, "__dict__") else getattr(owner, name))
    return out


@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
def test_model_inputs_and_patches_restored(fail):
    entry, model = zoo_model("llama")
    model.train()  # the caller's flag must come back too
    model.config.use_cache = True
    inputs = entry.sample_inputs(model)
    inputs_before = {k: v.clone() for k, v in inputs.items()}
    ids_before = {k: id(v) for k, v in inputs.items()}
    snap = snapshot_model(model)
    patched_before = _patched_values()
    switches_before = torch_switches()

    exporter = DynamoExporter()
    if fail:
        original = transformers.models.llama.modeling_llama.LlamaMLP.forward

        def boom(self, x):
            raise RuntimeError("injected failure inside the trace")

        transformers.models.llama.modeling_llama.LlamaMLP.forward = boom
        try:
            with pytest.raises(HfExportError, match="injected failure"):
                exporter.export(model, inputs, DynamoConfig(dynamic=True))
        finally:
            transformers.models.llama.modeling_llama.LlamaMLP.forward = original
    else:
        exporter.export(model, inputs, DynamoConfig(dynamic=True))

    assert diff_model_state(model, snap) == []
    assert model.training is True and "forward" not in model.__dict__
    assert {k: id(v) for k, v in inputs.items()} == ids_before
    for k, v in inputs.items():
        assert torch.equal(v, inputs_before[k])
    assert _patched_values() == patched_before
    assert torch_switches() == switches_before


def test_a_cache_in_the_inputs_is_not_mutated():
    entry, model = zoo_model("llama")
    inputs = entry.sample_inputs(model)
    with torch.no_grad():
        cache = model(**inputs).past_key_values
    before = copy.deepcopy(cache)
    step = {"input_ids": inputs["input_ids"][:, -1:], "past_key_values": cache}
    DynamoExporter().export(model, step, DynamoConfig(dynamic=True))
    assert len(cache.layers) == len(before.layers)
    for layer, ref in zip(cache.layers, before.layers):
        assert torch.equal(layer.keys, ref.keys) and torch.equal(layer.values, ref.values)
        assert not isinstance(layer.keys, torch._subclasses.FakeTensor)


def test_diff_model_state_notices_changes():
    _, model = zoo_model("bert")
    snap = snapshot_model(model)
    with torch.no_grad():
        next(model.parameters()).add_(1)
    model.eval() if model.training else model.train()
    model.forward = lambda **kw: None
    diffs = diff_model_state(model, snap)
    assert any("parameter" in d for d in diffs)
    assert any("training" in d for d in diffs)
    assert any("forward" in d for d in diffs)


class _RemembersLastInput(torch.nn.Module):
    """Keeps a tensor of its last call on itself and adds a new attribute (as Qwen2-VL's ``rope_deltas``)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.last = None

    def forward(self, x):
        self.last = x.sum(-1, keepdim=True)
        self.calls = getattr(self, "calls", 0) + 1
        return self.linear(x) + self.last


@pytest.mark.filterwarnings("ignore:The tensor attribute self.last was assigned during export")
@pytest.mark.parametrize("export_format", ["dynamo", "onnx"])
def test_attributes_a_forward_sets_while_traced_are_put_back(export_format):
    """torch.export's training-IR trace puts back a tensor attribute the forward assigned; its post-dispatch trace
    (the ONNX exporter's) leaves it holding a traced tensor: the export itself must put every attribute back."""
    from hfexport import AutoExportConfig, AutoHfExporter

    model = _RemembersLastInput().eval()
    snap = snapshot_model(model)
    config = AutoExportConfig.from_dict({"export_format": export_format, "dynamic": True})
    AutoHfExporter.from_config(config).export(model, {"x": torch.randn(2, 4)}, config)
    assert model.last is None and "calls" not in vars(model)
    assert diff_model_state(model, snap) == []


class _InstallsHooksOnFirstCall(torch.nn.Module):
    """As transformers' output capturing: the first forward hooks a child and sets a flag that it did."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        if not getattr(self, "_hooks_installed", False):
            self.linear.register_forward_hook(lambda module, args, out: out + 1)
            self._hooks_installed = True
        return self.linear(x)


@pytest.mark.parametrize("export_format", ["dynamo", "onnx"])
def test_hooks_and_their_flag_a_traced_forward_installs_go_together(export_format):
    """Taking the flag back but not the hooks would hook the child twice on the next eager call."""
    from hfexport import AutoExportConfig, AutoHfExporter

    torch.manual_seed(0)
    model, fresh = _InstallsHooksOnFirstCall().eval(), _InstallsHooksOnFirstCall().eval()
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(2, 4)
    config = AutoExportConfig.from_dict({"export_format": export_format, "dynamic": True})
    AutoHfExporter.from_config(config).export(model, {"x": x}, config)
    assert not model.linear._forward_hooks and "_hooks_installed" not in vars(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), fresh(x))


def test_diff_model_state_names_an_attribute_a_forward_set():
    model = _RemembersLastInput().eval()
    snap = snapshot_model(model)
    model(torch.randn(2, 4))
    assert sorted(diff_model_state(model, snap)) == ["model.calls was added", "model.last changed"]


class _Base:
    def greet(self):
        return "base"


class _Child(_Base):
    pass


def test_patches_revert_inherited_attributes_exactly_also_on_error():
    register_patch("test-only", f"{__name__}._Child.greet", reason="test")(lambda original: lambda self: "patched")
    try:
        with pytest.raises(RuntimeError):
            with apply_patches("test-only") as installed:
                assert _Child().greet() == "patched" and len(installed) == 1
                raise RuntimeError("boom")
        assert "greet" not in _Child.__dict__ and _Child().greet() == "base"
    finally:
        PATCHES.pop("test-only")


def test_every_patch_states_its_reason():
    for patches in PATCHES.values():
        for p in patches:
            assert p.reason.strip(), p.path
    with pytest.raises(ValueError, match="upstream bug"):
        register_patch("test-only", "x.y")(lambda original: original)


def _last_line_of_fresh_process(code: str) -> str:
    """What ``code`` prints last, run in a fresh interpreter (first-import effects need a fresh process)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_first_export_in_a_process_imports_no_modeling_code_the_caller_never_loaded():
    """Patches of modeling code apply only where it is loaded: importing another model's modeling module during
    an export runs transformers' lazy imports (loading llava's replaced sys.modules["transformers"]), which the
    downstream ``unchanged`` check saw as soon as the artifact cache made an export the first in its process."""
    code = (
        "import sys, torch, transformers\n"
        "from hfexport import DynamoExporter, DynamoConfig\n"
        "cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,"
        " num_attention_heads=4, vocab_size=64)\n"
        "model = transformers.BertModel(cfg).eval()\n"
        "module = sys.modules['transformers']\n"
        "before = {m for m in sys.modules if m.startswith('transformers.models.')}\n"
        "DynamoExporter().export(model, {'input_ids': torch.ones(1, 5, dtype=torch.long)}, DynamoConfig())\n"
        "new = sorted(m for m in sys.modules if m.startswith('transformers.models.') and m not in before"
        " and 'modeling_' in m)\n"
        "print(sys.modules['transformers'] is module, new)\n"
    )
    assert _last_line_of_fresh_process(code) == "True []"


def test_backends_once_per_process_setup_is_not_taken_for_a_change():
    """ExecuTorch replaces two flatbuffer ``Pack`` methods on its first serialisation in a process; the snapshot
    runs that set-up first, so the first export in a process is judged like any other."""
    code = (
        "import torch\n"
        "import executorch.exir._serialize._flatbuffer_program as fb\n"
        "from pytest_hfexport.hygiene import diff, snapshot\n"
        "model, inputs = torch.nn.Linear(2, 2), {'x': torch.ones(1, 2)}\n"
        "before = snapshot(model, inputs)\n"
        "fb._install_fast_packers()\n"
        "print(diff(before, model, inputs))\n"
    )
    assert _last_line_of_fresh_process(code) == "[]"

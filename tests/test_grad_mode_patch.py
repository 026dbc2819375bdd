"""A ``no_grad`` inside a forward traced without gradients records nothing; a real grad switch still happens."""

import pytest
import torch
from torch._export.passes import replace_set_grad_with_hop_pass as set_grad_pass

from hfexport import DynamoConfig, DynamoExporter, HfExportError

from helpers import tiny_llama


def grad_switches(graph_module: torch.fx.GraphModule) -> int:
    return sum(1 for n in graph_module.graph.nodes if n.target is torch._C._set_grad_enabled)


@pytest.fixture
def switches_handed_to_torch(monkeypatch):
    """How many grad-mode switches each trace handed to torch's pass that splits the graph at them."""
    seen = []
    original = set_grad_pass.replace_set_grad_with_hop_pass

    def spy(gm, signature):
        seen.append(grad_switches(gm))
        return original(gm, signature)

    monkeypatch.setattr(set_grad_pass, "replace_set_grad_with_hop_pass", spy)
    return seen


def test_rotary_embeddings_no_grad_records_no_switch(switches_handed_to_torch):
    model, inputs = tiny_llama(2)
    enter, exit_ = torch.no_grad.__enter__, torch.no_grad.__exit__
    program = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
    assert switches_handed_to_torch == [0]
    torch.testing.assert_close(program.module()(**inputs).logits, model(**inputs).logits)
    assert (torch.no_grad.__enter__, torch.no_grad.__exit__) == (enter, exit_)


MODES = []  # not on the module: the exporter puts a model's attributes back as they were


class SwitchesGrad(torch.nn.Module):
    """Turns gradients on, then off again inside: both are real switches and must still happen."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.enable_grad():
            MODES.append(torch.is_grad_enabled())
            with torch.no_grad():
                MODES.append(torch.is_grad_enabled())
                y = self.linear(x)
            MODES.append(torch.is_grad_enabled())
        MODES.append(torch.is_grad_enabled())
        return y * 2


def test_a_real_switch_still_switches(switches_handed_to_torch):
    model = SwitchesGrad().eval()
    x = torch.randn(3, 4)
    MODES.clear()
    program = DynamoExporter().export(model, {"x": x}, DynamoConfig(dynamic=True))
    assert MODES == [True, False, True, False]
    assert switches_handed_to_torch == [4]
    torch.testing.assert_close(program.module()(x=x), model(x))


def test_a_failed_export_puts_no_grad_back():
    enter, exit_ = torch.no_grad.__enter__, torch.no_grad.__exit__

    class Fails(torch.nn.Module):
        def forward(self, x):
            with torch.no_grad():
                raise RuntimeError("cannot be traced")

    with pytest.raises(HfExportError):
        DynamoExporter().export(Fails(), {"x": torch.randn(2, 3)}, DynamoConfig(dynamic=True))
    assert (torch.no_grad.__enter__, torch.no_grad.__exit__) == (enter, exit_)

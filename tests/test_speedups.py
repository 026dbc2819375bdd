"""One switch turns every speed-up off (``hfexport.speedups``); the results stay what they were."""

import pytest
import torch

from hfexport import ExecutorchConfig, ExecutorchExporter, speedups
from hfexport.patching import PATCHES, apply_patches
from hfexport.runtime import runner_for

from helpers import tiny_llama


def _speedup_patches():
    return [p for patches in PATCHES.values() for p in patches if p.speedup]


def test_the_speedups_are_registered_and_the_switch_turns_each_off(monkeypatch):
    found = {p.path.rsplit(".", 1)[-1] for p in _speedup_patches()}
    assert {"run_decompositions", "call", "_create_partitions_in_graph_module", "sympy"} <= found
    assert all(p.applies for p in _speedup_patches())
    with speedups.speedups_off():
        assert not any(p.applies for p in _speedup_patches())
    monkeypatch.setenv(speedups.ENV, "0")
    assert not speedups.enabled() and not any(p.applies for p in _speedup_patches())


def test_correctness_patches_stay_on_with_the_speedups_off():
    """ExecuTorch's lowering set holds both kinds: the switch leaves only the correctness patches."""
    from hfexport.executorch.fixes import LOWERING

    with apply_patches(LOWERING) as installed:
        assert any(p.speedup for p in installed) and any(not p.speedup for p in installed)
    with speedups.speedups_off(), apply_patches(LOWERING) as installed:
        assert installed and not any(p.speedup for p in installed)


@pytest.mark.hfexport_slow
def test_an_executorch_export_gives_the_same_program_outputs_without_its_speedups():
    model, sample = tiny_llama()
    config = ExecutorchConfig(dynamic=True)
    fast = ExecutorchExporter().export(model, sample, config)
    with speedups.speedups_off():
        slow = ExecutorchExporter().export(model, sample, config)
    one = {k: v[:, :3] for k, v in sample.items()}
    for inputs in (sample, one):
        a, b = runner_for(fast, "executorch")(inputs), runner_for(slow, "executorch")(inputs)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

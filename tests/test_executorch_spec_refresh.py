"""The skipped metadata retrace of ``SpecPropPass`` (``edge_pass_triggers.METADATA_RETRACE``).

``to_executorch`` retraces the whole lowered program once more, rewriting nothing, so that every node's fake value
is fresh before the tensor specs are made from them. hfexport skips that retrace where every node already has a
value. The emitted program must then be the one the retrace gives, field by field; the only field left out is
``requires_grad``, which the retrace (run with grad mode on) sets on values computed from parameters and which an
inference program does not read.

Three programs: llama's (the skip is taken), a buffer updated in place by hfexport's ``cache_updates_in_place``
(taken: an in-place op's value is not its input's, and memory planning must alias them anyway), and a buffer
written back by ``to_executorch``'s ``copy_`` (not taken: the write-back has no value). The fault, a skip that
never refreshes, fails to lower the last one.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("executorch")

from hfexport import ExecutorchConfig, ExecutorchExporter, HfExportError  # noqa: E402
from hfexport.executorch.speedups import edge_pass_triggers  # noqa: E402

from helpers import zoo_model  # noqa: E402

SKIPPED = "ExportPass skipped"


class InPlaceCache(torch.nn.Module):
    """A buffer updated by ``index_put_``: hfexport keeps the update in place, so nothing is written back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8, 4))
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, pos):
        self.cache.index_put_((torch.arange(2)[:, None], pos[None, :]), self.proj(x))
        return self.cache.sum(1) * 2


class WrittenBackCounter(InPlaceCache):
    """Also a counter buffer advanced by ``add_``: ``to_executorch`` writes it back with a ``copy_``."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    def forward(self, x, pos):
        self.seen.add_(pos.numel())
        return super().forward(x, pos) + self.seen


def emitted(value):
    """The emitted program as nested tuples, ``requires_grad`` left out."""
    if dataclasses.is_dataclass(value):
        return tuple((f.name, emitted(getattr(value, f.name))) for f in dataclasses.fields(value)
                     if f.name != "requires_grad")
    if isinstance(value, (list, tuple)):
        return tuple(emitted(v) for v in value)
    return value


def sample(name):
    torch.manual_seed(0)
    if name == "llama":
        entry, model = zoo_model("llama")
        return model, entry.sample_inputs(model), ExecutorchExporter(), True
    model = {"in_place": InPlaceCache, "written_back": WrittenBackCounter}[name]()
    inputs = {"x": torch.randn(2, 3, 4), "pos": torch.tensor([1, 2, 3])}
    return model, inputs, ExecutorchExporter(cache_as_buffers=True), False


def lower(name, caplog, trigger="keep", monkeypatch=None):
    """(the emitted program, whether the metadata retrace was skipped); ``trigger``: keep the table's,
    ``drop`` it (EXIR's retrace always runs), or ``never`` (the fault: always skip)."""
    if trigger != "keep":
        triggers = dict(edge_pass_triggers.TRIGGERS)
        if trigger == "drop":
            del triggers[edge_pass_triggers.METADATA_RETRACE]
        else:
            triggers[edge_pass_triggers.METADATA_RETRACE] = lambda graph_module: False
        monkeypatch.setattr(edge_pass_triggers, "TRIGGERS", triggers)
    model, inputs, exporter, dynamic = sample(name)
    caplog.clear()
    with caplog.at_level("DEBUG", logger="hfexport.executorch.speedups.retraces"):
        manager = exporter.export(model, inputs, ExecutorchConfig(dynamic=dynamic))
    skipped = any(SKIPPED in r.getMessage() for r in caplog.records)
    return emitted(manager.executorch_program), skipped


@pytest.mark.parametrize("name, taken", [("llama", True), ("in_place", True), ("written_back", False)])
def test_the_skip_gives_the_program_the_retrace_gives(name, taken, caplog, monkeypatch):
    program, skipped = lower(name, caplog)
    assert skipped == taken
    with monkeypatch.context() as patch:
        reference, retrace_skipped = lower(name, caplog, "drop", patch)
    assert not retrace_skipped
    assert program == reference


def test_a_skip_that_never_refreshes_is_caught(caplog, monkeypatch):
    with pytest.raises(HfExportError, match="Invalid node spec"):
        lower("written_back", caplog, "never", monkeypatch)

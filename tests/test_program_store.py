"""hfexport.runtime.program_store: a .pt2 is deserialised once per process while unchanged, and every load is
a program of its own (a buffer one runner writes is not another's), sharing only the weights."""

from __future__ import annotations

import os

import pytest
import torch

from hfexport.runtime import DynamoRunner, program_store
from hfexport.runtime.program_store import load_program

from helpers import BufferCounter, count_export_loads


def _save(path, scale: float = 2.0) -> None:
    program = torch.export.export(BufferCounter(scale), (torch.ones(3),))
    tmp = path.with_suffix(".tmp.pt2")
    torch.export.save(program, str(tmp))
    os.replace(tmp, path)  # as an atomic writer does: a new file under the old name


@pytest.fixture
def reads(monkeypatch):
    program_store.forget_programs()
    yield count_export_loads(monkeypatch)
    program_store.forget_programs()


def test_an_unchanged_file_is_read_once(tmp_path, reads):
    path = tmp_path / "counter.pt2"
    _save(path)
    first, second = load_program(path), load_program(path)
    assert len(reads) == 1
    assert first is not second
    x = torch.ones(3)
    torch.testing.assert_close(first.module()(x), second.module()(x))


def test_each_load_owns_the_buffers_its_graph_writes_and_shares_the_weights(tmp_path, reads):
    path = tmp_path / "counter.pt2"
    _save(path)
    first, second = load_program(path), load_program(path)
    x = torch.ones(3)
    one = first.module()
    one(x), one(x)
    assert first.state_dict["calls"].item() == 2
    assert second.state_dict["calls"].item() == 0, "a second load saw the first one's writes"
    torch.testing.assert_close(second.module()(x), x * 2 + 1)
    assert first.state_dict["weight"].data_ptr() == second.state_dict["weight"].data_ptr()
    assert load_program(path).state_dict["calls"].item() == 0


def test_a_replaced_file_is_read_again(tmp_path, reads):
    path = tmp_path / "counter.pt2"
    _save(path, scale=2.0)
    load_program(path)
    _save(path, scale=3.0)
    program = load_program(path)
    assert len(reads) == 2
    torch.testing.assert_close(program.module()(torch.ones(3)), torch.full((3,), 4.0))


def test_runners_over_one_file_do_not_share_state(tmp_path, reads):
    path = tmp_path / "counter.pt2"
    _save(path)
    x = torch.ones(3)
    first = DynamoRunner(str(path))
    first.module(x)
    second = DynamoRunner(str(path))
    torch.testing.assert_close(second.module(x), x * 2 + 1)
    assert len(reads) == 1

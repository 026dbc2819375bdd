"""pytest_hfexport.exported_files: the plugin reads a .pt2 once per content, and each check gets its own copy."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

from pytest_hfexport import exported_files

from helpers import BufferCounter, count_export_loads


@pytest.fixture
def reads(monkeypatch):
    monkeypatch.setattr(exported_files, "_read", OrderedDict())
    return count_export_loads(monkeypatch)


def _save(path, scale: float) -> None:
    torch.export.save(torch.export.export(BufferCounter(scale), (torch.ones(3),)), str(path))


def test_a_file_is_read_once_and_each_caller_gets_its_own_program(tmp_path, reads):
    path = tmp_path / "model.pt2"
    _save(path, 2.0)
    x = torch.ones(3)
    first = exported_files.read_exported_program(path).module()
    first(x)
    second = exported_files.read_exported_program(path).module()
    torch.testing.assert_close(second(x), x * 2 + 1)  # not the first caller's count
    assert len(reads) == 1


def test_a_rewritten_file_is_read_again(tmp_path, reads):
    path = tmp_path / "model.pt2"
    _save(path, 2.0)
    exported_files.read_exported_program(path)
    _save(path, 3.0)
    program = exported_files.read_exported_program(path)
    torch.testing.assert_close(program.module()(torch.ones(3)), torch.full((3,), 4.0))
    assert len(reads) == 2


def test_only_the_most_recent_programs_are_kept(tmp_path, reads, monkeypatch):
    monkeypatch.setattr(exported_files, "KEPT", 2)
    paths = [tmp_path / f"model{i}.pt2" for i in range(3)]
    for i, path in enumerate(paths):
        _save(path, float(i + 1))
        exported_files.read_exported_program(path)
    assert len(exported_files._read) == 2
    exported_files.read_exported_program(paths[0])  # let go, so read again
    assert reads.count(str(paths[0])) == 2

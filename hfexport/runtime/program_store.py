"""Read a ``.pt2`` file once per process while it is unchanged: ``load_program(path)``.

``torch.export.load`` spends most of its time rebuilding the program's symbolic shapes (it parses every size
expression of every node); for a small model that is 0.5-1 s a file, often longer than whatever then runs the
program. A process that opens one artifact several times (a test suite's checks, a service building a runner per
worker) pays it each time. The store keeps the last few programs it read, keyed by the file's identity (resolved
path, size, modification and change times, inode: a rewrite or an atomic replace is a new key), and returns a
copy per call.

A copy shares the stored program's parameters and the buffers the graph never writes, and owns everything else
(graph, signature, example inputs, the buffers the graph updates in place): two runners over one file never see
each other's state, and the weights are held once. Programs whose tensors exceed ``MAX_STORED_BYTES`` are not
kept (a large model's load is dominated by reading its weights, and keeping them would hold memory the caller
freed).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from .. import caches, graph_writes
from ..patching import apply_patches
from ..patching.program_load import PROGRAM_LOAD

logger = logging.getLogger(__name__)

MAX_STORED_PROGRAMS = 16
MAX_STORED_BYTES = 512 * 1024 * 1024  # all stored programs' tensors together

_lock = threading.Lock()
# One load at a time: the load patches swap names in torch's serialiser module for the duration of a load, and
# two overlapping swaps could leave one behind (deserialising is Python work; threads gain nothing from overlap).
_load_lock = threading.Lock()
_stored: OrderedDict[tuple[Any, ...], torch.export.ExportedProgram] = OrderedDict()


def _identity(path: Path) -> tuple[Any, ...]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def _tensor_bytes(program: torch.export.ExportedProgram) -> int:
    tensors = list(program.state_dict.values()) + list(program.constants.values())
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _written_state(program: torch.export.ExportedProgram) -> set[str] | None:
    """State names (parameters, buffers, constants) the program writes: a functional program lists them as
    mutations in its signature; torch.export's training IR keeps the in-place op that writes one, found by
    the graph walk. None when the walk cannot tell (a higher-order op): then nothing is shared."""
    written_placeholders = graph_writes.written_inputs(program)
    if any(name.startswith("<") for name in written_placeholders):
        return None
    signature = program.graph_signature
    targets = {s.arg.name: s.target for s in signature.input_specs if s.target is not None}
    written = {targets[name] for name in written_placeholders if name in targets}
    written |= {s.target for s in signature.output_specs if s.target is not None and "MUTATION" in s.kind.name}
    return written


def _copy(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A deep copy that shares the tensors the graph only reads (weights, unwritten buffers and constants)."""
    written = _written_state(program)
    if written is None:
        return copy.deepcopy(program)
    state = list(program.state_dict.items()) + list(program.constants.items())
    shared = {id(t): t for name, t in state if name not in written and isinstance(t, torch.Tensor)}
    return copy.deepcopy(program, shared)


def _stored_bytes() -> int:
    return sum(_tensor_bytes(p) for p in _stored.values())


def load_program(path: str | Path) -> torch.export.ExportedProgram:
    """``torch.export.load(path)``, read from disk only when this process has not read the file as it is now."""
    caches.register_cache_pytrees()  # a saved program's example inputs hold caches
    path = Path(path)
    key = _identity(path)
    with _lock:
        program = _stored.get(key)
        if program is not None:
            _stored.move_to_end(key)
            return _copy(program)
    with _load_lock, apply_patches(PROGRAM_LOAD):
        program = torch.export.load(str(path))
    size = _tensor_bytes(program)
    if size > MAX_STORED_BYTES:
        logger.debug("%s holds %d bytes of tensors; not kept for the next load", path, size)
        return program
    with _lock:
        for other in [k for k in _stored if k[0] == key[0]]:  # an older version of the same file
            del _stored[other]
        _stored[key] = program
        while len(_stored) > MAX_STORED_PROGRAMS or _stored_bytes() > MAX_STORED_BYTES:
            _stored.popitem(last=False)
        return _copy(program)


def forget_programs() -> None:
    """Drop every stored program (their memory goes once no runner uses them)."""
    with _lock:
        _stored.clear()

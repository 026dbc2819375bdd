"""Atomic artifact writes: a save either produces every file or none.

Each file is written under a temporary name in the target folder and renamed
into place only after the whole save succeeded, so a crash or an exception never
leaves a partial ``.onnx``, ``.pte`` or ``.pt2`` behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder; files written there as ``<name>`` are moved next to ``path`` on success.

    The writer writes the main file as ``tmp / Path(path).name`` (and any side files beside it).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        produced = sorted(p for p in tmp.iterdir())
        if not any(p.name == target.name for p in produced):
            raise FileNotFoundError(f"the writer produced no {target.name} (wrote {[p.name for p in produced]})")
        # Side files first, the main file last: a reader polling for the main file sees a whole set.
        for p in sorted(produced, key=lambda p: p.name == target.name):
            os.replace(p, target.parent / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""What each of hfexport's measured coverage failures means: a structural limit, or the next thing to fix.

A failing cell is matched by its architecture name and backend (regular expressions, searched) and by its
stage and message (``cause``, searched in ``stage: message``). ``structural`` entries fail for a reason no
exporter can remove (the model's forward draws random numbers, so no artifact can equal one eager run; the
runtime has no kernel for an op); ``fix`` entries are hfexport defects, with what the analysis found, so they
become a fix with a zoo entry that keeps it fixed. The report lists every failing cell with its entry, and
each one no entry matches as not triaged: a new failure is never silently counted as understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STRUCTURAL, FIX = "structural", "fix"


@dataclass(frozen=True)
class Triage:
    arch: str
    backend: str
    cause: str
    kind: str
    reason: str

    def matches(self, record: dict[str, Any]) -> bool:
        text = f"{record.get('stage', '')}: {record.get('message', '')}"
        return bool(
            re.search(self.arch, record.get("arch", ""))
            and re.search(self.backend, record.get("backend", ""))
            and re.search(self.cause, text)
        )


TRIAGE: tuple[Triage, ...] = ()


def triage(record: dict[str, Any]) -> Triage | None:
    """The first entry that explains this failing cell, or None."""
    return next((entry for entry in TRIAGE if entry.matches(record)), None)

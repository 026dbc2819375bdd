"""Errors that say which stage failed and what to do next.

The plugin and the conformance report group failures by stage, so every error an
export raises carries one: eager, export, lowering, save, load, run.
"""

from __future__ import annotations

STAGES = ("eager", "export", "lowering", "save", "load", "run", "mismatch")


class HfExportError(RuntimeError):
    """An export step failed; ``stage`` names the step, the message says what to try."""

    def __init__(self, message: str, stage: str = "export", component: str | None = None) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {STAGES}")
        self.stage = stage
        self.component = component
        prefix = f"[{component}] " if component else ""
        super().__init__(prefix + message)


class RunnerInputError(ValueError):
    """A runner was called with a missing, unknown or mis-shaped input."""

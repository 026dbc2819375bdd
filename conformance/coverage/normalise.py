"""Failure causes: a failure's stage and message with the run-specific parts removed, so equal causes count
together in the report's histogram.

Numbers, addresses, symbolic sizes (``s0``, ``u7``), file paths, quoted values and temporary names
differ from model to model while the cause is the same ("shape (1, 6, 32) != eager (2, 9, 32)" and
"shape (1, 4, 16) != eager (2, 7, 16)" are one cause); they are replaced by placeholders.
"""

from __future__ import annotations

import re

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"(?:/[\w.+-]+){2,}/?"), "<path>"),
    (re.compile(r"\b(?:s|u|zuf)\d+\b"), "<sym>"),  # symbolic sizes and unbacked symbols
    (re.compile(r"\b[A-Za-z_]+_\d+\b"), "<name>"),  # generated node names: add_7, getitem_12
    (re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<n>"),  # not inside names: float32 stays
    (re.compile(r"(?:<n>\s*,\s*)+<n>"), "<n>"),  # tuples and lists of numbers: one placeholder
    (re.compile(r"\s+"), " "),
)
MAX_CHARS = 160


def normalise(message: str) -> str:
    """The message's first line with numbers, addresses, symbols, paths and generated names replaced."""
    lines = [line for line in (message or "").splitlines() if line.strip()]
    text = lines[0] if lines else ""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    text = text.strip()
    return text[:MAX_CHARS] + ("…" if len(text) > MAX_CHARS else "")


def cause(stage: str, message: str) -> str:
    """``stage: normalised message``: one bucket of the failure histogram."""
    text = normalise(message)
    return f"{stage}: {text}" if text else stage

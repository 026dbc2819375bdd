"""Exit codes of the command line and the error that carries one.

Exit codes are part of the interface (CI scripts branch on them):

    0  everything asked for succeeded
    1  an artifact's outputs (or generated tokens) differ from eager PyTorch beyond the tolerance
    2  usage error: bad path, unknown format, a folder without config.json, options that do not go together
    3  the export (or loading/running an artifact) failed
"""

from __future__ import annotations

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


class CliError(Exception):
    """An error with the exit code it maps to; the message always says what to do next."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


def export_failed(message: str) -> CliError:
    return CliError(message, EXIT_FAILED)

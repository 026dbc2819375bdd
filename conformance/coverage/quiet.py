"""Keep third-party chatter off the terminal: the sweep's terminal shows its progress bar only.

Workers send their own stdout and stderr (Python's and native libraries' alike, by file descriptor)
to a log file per architecture, and ignore warnings and library logging.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",  # one core per worker: --jobs N workers use N cores
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "PYTHONWARNINGS": "ignore",
    "HF_HUB_OFFLINE": "1",  # models are built from configs: nothing is downloaded
}


def set_environment() -> None:
    """Before the fork server starts: it and every worker inherit these."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)


def silence_python() -> None:
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)


def redirect_output(log_path: str) -> None:
    """Point file descriptors 1 and 2 (Python's and native code's output) at ``log_path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    silence_python()

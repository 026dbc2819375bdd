"""Third-party messages that hfexport's own work causes, silenced only while hfexport does that work.

A library user's export of a Llama to ONNX and ExecuTorch printed a screen of lines before any of its own output:
torchao's CUDA-only kernels failing to load on a CPU machine, torch's pytree deprecation for the enums torchao
registers, torch.onnx skipping torchvision's operators, and deprecation warnings torch raises inside its own
code while hfexport copies programs. None of them says anything the user can act on. Each is listed below once,
with where it comes from; ``quiet()`` lowers those loggers and ignores those warnings for the duration of an
export, a save or a load, then puts everything back: the user's logging levels and warning filters are never
changed outside hfexport's own calls. Anything not listed (an error, a warning hfexport did not cause) passes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

# logger name -> why its warnings are noise here.
NOISY_LOGGERS = {
    "torchao": "'Failed to load ..._C_mxfp8 ... .so': CUDA-only kernels probed on import, on a CPU machine",
    "torch.utils._pytree": "'<enum ...> is an Enum subclass ... register_constant() is deprecated': torchao's enums",
    "torch.onnx._internal.exporter._registration": "'torchvision is not installed. Skipping torchvision::nms'",
}
# (category, message regex) of warnings raised inside torch and ExecuTorch while hfexport exports.
NOISY_WARNINGS = (
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    (FutureWarning, r"treespec.children_specs is deprecated"),
    (UserWarning, r"Mutation on a buffer in the model is detected"),
    (DeprecationWarning, r"read_binary is deprecated"),
    (DeprecationWarning, r"This API is experimental and subject to change without notice"),
    # ExecuTorch reads its edge-dialect tables with importlib.resources' legacy API on first lowering.
    (DeprecationWarning, r"(read_text|open_text) is deprecated"),
    # torch's own modules still decorate with torch.jit.script_method; importing them during a lowering warns.
    (DeprecationWarning, r"`torch.jit.script_method` is deprecated"),
    # onnx's reference evaluator folding constants of masks (log(0) = -inf, a cast of -inf) in the optimizer.
    (RuntimeWarning, r"divide by zero encountered in log"),
    (RuntimeWarning, r"invalid value encountered in cast"),
)

F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The listed loggers at ERROR and the listed warnings ignored, for the block only."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for category, message in NOISY_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        for logger in loggers:
            logger.setLevel(max(logger.level, logging.ERROR))
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def quieted(fn: F) -> F:
    """``fn`` run inside ``quiet()``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]

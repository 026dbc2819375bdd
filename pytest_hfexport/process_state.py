"""The process-wide state an export may not leave changed: torch's global switches, the random generators,
warnings filters, logging, environment variables and the interpreter's recursion limit.

An exporter that silences warnings "just for the trace", reseeds torch, turns a backend flag off or sets an
environment variable and forgets to put it back changes every later computation in the caller's process.
Each entry here is read by value; ``pytest_hfexport.hygiene`` takes it before an export and diffs it after.
Loggers and warnings filters are judged by what existed before the export (a module imported for the first
time may add its own loggers and narrowly scoped filters); a blanket filter (no message, no module) added by
the export is reported, as is every changed or removed entry.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import os
import random
import sys
import warnings
from collections.abc import Callable
from typing import Any

# Global switches that change what torch computes or how, each read through its own getter.
TORCH_SWITCHES: dict[str, Callable[[Any], Any]] = {
    "grad enabled": lambda torch: torch.is_grad_enabled(),
    "inference mode": lambda torch: torch.is_inference_mode_enabled(),
    "anomaly detection": lambda torch: torch.is_anomaly_enabled(),
    "default dtype": lambda torch: torch.get_default_dtype(),
    "default device": lambda torch: str(torch.get_default_device()),
    "threads": lambda torch: torch.get_num_threads(),
    "inter-op threads": lambda torch: torch.get_num_interop_threads(),
    "deterministic algorithms": lambda torch: torch.are_deterministic_algorithms_enabled(),
    "deterministic warn only": lambda torch: torch.is_deterministic_algorithms_warn_only_enabled(),
    "warn always": lambda torch: torch.is_warn_always_enabled(),
    "float32 matmul precision": lambda torch: torch.get_float32_matmul_precision(),
    "autocast (cpu)": lambda torch: torch.is_autocast_enabled("cpu"),
    "tracing state": lambda torch: torch._C._get_tracing_state() is not None,
    "mkldnn enabled": lambda torch: torch.backends.mkldnn.enabled,
    "mha fast path": lambda torch: torch.backends.mha.get_fastpath_enabled(),
    "opt_einsum enabled": lambda torch: torch.backends.opt_einsum.enabled,
    "cudnn enabled": lambda torch: torch.backends.cudnn.enabled,
    "cudnn deterministic": lambda torch: torch.backends.cudnn.deterministic,
    "cudnn benchmark": lambda torch: torch.backends.cudnn.benchmark,
    "cuda matmul allow tf32": lambda torch: torch.backends.cuda.matmul.allow_tf32,
    "sdpa flash": lambda torch: torch.backends.cuda.flash_sdp_enabled(),
    "sdpa memory-efficient": lambda torch: torch.backends.cuda.mem_efficient_sdp_enabled(),
    "sdpa math": lambda torch: torch.backends.cuda.math_sdp_enabled(),
    "sdpa cudnn": lambda torch: torch.backends.cuda.cudnn_sdp_enabled(),
    # Tracing switches an exporter sets while it traces: left on, they change every later torch.export in the process.
    "fx stack traces off": lambda torch: torch.fx.config.do_not_emit_stack_traces,
    "size-oblivious tracing": lambda torch: torch.fx.experimental._config.backed_size_oblivious,
}


def _digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def torch_switches() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {}
    for name, read in TORCH_SWITCHES.items():
        try:
            state[name] = read(torch)
        except (AttributeError, RuntimeError) as exc:  # a switch this build lacks: recorded, so a change is seen
            state[name] = f"unreadable ({type(exc).__name__})"
    return state


def random_state() -> dict[str, Any]:
    """Every generator a caller may have seeded: an export draws no random numbers and reseeds nothing."""
    import torch

    state: dict[str, Any] = {"torch RNG": torch.random.get_rng_state(), "python RNG": _digest(random.getstate())}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, position, *rest = numpy.random.get_state()
        state["numpy RNG"] = _digest((kind, keys.tobytes(), position, rest))
    return state


def interpreter_state() -> dict[str, Any]:
    """Environment variables (each by name), the recursion limit and the warnings machinery's entry points."""
    state: dict[str, Any] = {f"environment variable {k}": v for k, v in os.environ.items()}
    state["recursion limit"] = sys.getrecursionlimit()
    state["warnings.showwarning"] = id(warnings.showwarning)
    state["logging disabled at"] = logging.root.manager.disable
    return state


def _filter_key(item: tuple) -> str:
    action, message, category, module, lineno = item
    message, module = getattr(message, "pattern", message) or "", getattr(module, "pattern", module) or ""
    scope = "every message of every module" if not (message or module or lineno) else f"{message=} {module=} {lineno=}"
    return f"{action} {getattr(category, '__name__', category)}: {scope}"


def warnings_filters() -> tuple[str, ...]:
    """The filters, in the order Python tries them (the first that matches decides)."""
    return tuple(_filter_key(item) for item in warnings.filters)


# Warning categories any code may emit; a library's own category (ruamel.yaml's "once" filters for its
# warnings, installed on import) is that library's business.
BUILTIN = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Warning)}


def _blanket(key: str) -> bool:
    return key.endswith("every message of every module") and key.split()[1].rstrip(":") in BUILTIN


def filter_changes(before: tuple[str, ...], after: tuple[str, ...]) -> list[str]:
    """What an export did to the filters: one removed; the ones that were there now in another order (a filter
    moved to the front decides first: ``simplefilter("ignore")`` over an existing one moves it there); a blanket
    filter added for a built-in category. A narrowly scoped filter an import adds is not reported."""
    problems = [
        f"warnings filter removed: {key}" for key in dict.fromkeys(before) if after.count(key) < before.count(key)
    ]
    kept = set(before)
    if not problems and [key for key in after if key in kept] != list(before):
        problems.append("warnings filters reordered: " + ", ".join(k for k, b in zip(after, before) if k != b)[:300])
    problems += [f"warnings filter added: {key}" for key in after if key not in kept and _blanket(key)]
    return problems


# Loggers whose handlers their own library changes on first use, whoever runs it: name -> why.
SELF_MANAGED_LOGGERS = {
    "torch.__trace": "torch's structured-trace logger removes its LazyTraceHandler on the first record when no "
    "trace directory is configured",
}


def loggers() -> dict[str, Any]:
    """Every existing logger's level, disabled and propagate flags and handlers (by identity)."""
    state: dict[str, Any] = {}
    named = [("root", logging.getLogger())] + [
        (name, lg)
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and name not in SELF_MANAGED_LOGGERS
    ]
    for name, logger in named:
        state[f"logger {name}"] = (
            logger.level,
            logger.disabled,
            logger.propagate,
            tuple(id(h) for h in logger.handlers),
        )
    return state

"""EXIR's pass-manager check, run once per state of a program rather than once per call (``executorch_lowering``).

``ExportedProgramPassManager.check`` recompiles the graph's Python code, lints the graph and runs the program's
verifiers. The manager checks before and after every pass, and XNNPACK's preprocess runs its 17 passes through 17
managers per partition: on a tiny Qwen2 (29 partitions) that was 988 checks in one export, about 0.8 of its 9
seconds, though most passes leave the partition as they found it and the check before a pass repeats the check
after the one before.

The check is a function of the program it is given. This patch remembers, per graph module, the state it last
checked: the graph's structure (every node's kind, target, name and arguments, in every graph of the module), the
identity of every node's value metadata, the signature, the verifiers and the names of the state and constants.
Asked again about the very same state, it returns as the check returned then; any change runs the check again. A
check that raised is not remembered.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .executorch_fixes import LOWERING
from .executorch_retraces import fingerprint
from .registry import register_patch

# Graph module -> the state its program was last checked in. Kept beside the module, not on it: a state holds fake
# tensors, which a deep copy or a pickle of the module must not meet.
_CHECKED: weakref.WeakKeyDictionary[torch.fx.GraphModule, _CheckedState] = weakref.WeakKeyDictionary()


class _CheckedState:
    """What a check depends on. Metadata values are compared by identity: comparing fake tensors would dispatch."""

    def __init__(self, program: Any) -> None:
        graphs = [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
        nodes = [n for m in graphs for n in m.graph.nodes]
        self.structure = (
            tuple(fingerprint(m) for m in graphs),
            str(program.graph_signature),
            tuple(type(v) for v in program.verifiers),
            tuple(program.state_dict),
            tuple(program.constants),
        )
        self.values = [n.meta.get("val") for n in nodes]

    def same(self, other: _CheckedState) -> bool:
        return (
            self.structure == other.structure
            and len(self.values) == len(other.values)
            and all(a is b for a, b in zip(self.values, other.values))
        )


def _check_each_state_once(original: Callable) -> Callable:
    @functools.wraps(original)
    def check(self: Any, exported_program: Any) -> None:
        module = exported_program.graph_module
        state = _CheckedState(exported_program)
        last = _CHECKED.get(module)
        if last is not None and last.same(state):
            return None
        original(self, exported_program)
        _CHECKED[module] = state
        return None

    return check


register_patch(
    LOWERING,
    "executorch.exir.pass_manager.ExportedProgramPassManager.check",
    reason="the pass manager checks the program before and after each pass, and XNNPACK's preprocess runs one "
    "manager per pass per partition: most checks see the state the previous one passed. Remembered per state. "
    "Drop when EXIR checks only after a pass that changed the program.",
)(_check_each_state_once)

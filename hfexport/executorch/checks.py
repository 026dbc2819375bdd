"""EXIR's pass-manager check, run once per state of a program rather than once per call (``executorch_lowering``).

``ExportedProgramPassManager.check`` recompiles the graph's Python code, lints the graph and runs the program's
verifiers. The manager checks before and after every pass, and XNNPACK's preprocess runs its 17 passes through 17
managers per partition: on a tiny Qwen2 (29 partitions) that was 988 checks in one export, about 0.8 of its 9
seconds, though most passes leave the partition as they found it and the check before a pass repeats the check
after the one before.

The program's own validation (``ExportedProgram._validate``: its verifiers over the whole graph) repeats the same
way. ``to_backend`` validates the edge program it was handed, a deep copy of it (the fake-weight program the
partitioner reads), the partitioned program and then, constructing the result, the partitioned program again: on a
tiny T5 those validations took about a second of each generation export's 26 (a throwaway profile).

Both are functions of the program they are given. These patches remember, per graph module, the state last checked
(or validated): the graph's structure (every node's kind, target, name and arguments, in every graph of the
module), the identity of every node's value metadata, the signature, the verifiers, the names and types of the
state and constants and the module call graph's entries. Asked again about the very same state, each returns as
it returned then; any change runs it again. A check that raised is not remembered.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..patching.registry import register_patch
from .fixes import LOWERING
from .speedups.retraces import fingerprint

# Graph module -> the state its program was last checked (validated) in. Kept beside the module, not on it: a state
# holds fake tensors, which a deep copy or a pickle of the module must not meet.
_CHECKED: weakref.WeakKeyDictionary[torch.fx.GraphModule, _CheckedState] = weakref.WeakKeyDictionary()
_VALIDATED: weakref.WeakKeyDictionary[torch.fx.GraphModule, _CheckedState] = weakref.WeakKeyDictionary()


class _CheckedState:
    """What a check depends on. Metadata values are compared by identity: comparing fake tensors would dispatch."""

    def __init__(self, program: Any) -> None:
        graphs = [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
        nodes = [n for m in graphs for n in m.graph.nodes]
        self.structure = (
            tuple(fingerprint(m) for m in graphs),
            str(program.graph_signature),
            tuple(type(v) for v in program.verifiers),
            tuple((k, type(v)) for k, v in program.state_dict.items()),
            tuple((k, type(v)) for k, v in program.constants.items()),
            tuple((e.fqn, str(e.signature)) for e in program.module_call_graph),
        )
        self.values = [n.meta.get("val") for n in nodes]

    def same(self, other: _CheckedState) -> bool:
        return (
            self.structure == other.structure
            and len(self.values) == len(other.values)
            and all(a is b for a, b in zip(self.values, other.values))
        )


def _once_per_state(memo: weakref.WeakKeyDictionary, run: Callable[[], None], program: Any) -> None:
    """``run()`` (a check of ``program``) unless ``memo`` holds the program's current state for its module."""
    module = program.graph_module
    state = _CheckedState(program)
    last = memo.get(module)
    if last is not None and last.same(state):
        return
    run()
    memo[module] = state


def _check_each_state_once(original: Callable) -> Callable:
    @functools.wraps(original)
    def check(self: Any, exported_program: Any) -> None:
        _once_per_state(_CHECKED, lambda: original(self, exported_program), exported_program)

    return check


def _validate_each_state_once(original: Callable) -> Callable:
    @functools.wraps(original)
    def _validate(self: Any) -> None:
        _once_per_state(_VALIDATED, lambda: original(self), self)

    return _validate


register_patch(
    LOWERING,
    "executorch.exir.pass_manager.ExportedProgramPassManager.check",
    reason="the pass manager checks the program before and after each pass, and XNNPACK's preprocess runs one "
    "manager per pass per partition: most checks see the state the previous one passed. Remembered per state. "
    "Drop when EXIR checks only after a pass that changed the program.",
)(_check_each_state_once)
register_patch(
    LOWERING,
    "torch.export.exported_program.ExportedProgram._validate",
    reason="to_backend validates the program it is handed, a deep copy of it and the partitioned program twice, "
    "and the pass manager's checks validate too: many on a state already validated. Remembered per state. Drop "
    "when EXIR validates each program once.",
)(_validate_each_state_once)

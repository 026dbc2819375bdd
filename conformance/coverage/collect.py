"""The coverage sweep as a pytest collection: which architectures, which backends, and when it is collected at all.

``conformance/coverage/test_sweep.py`` holds one test per check (``test_export``, ``test_generation``); each is
parametrized over the selected architectures here and over the selected backends by the plugin, so one item
is one architecture x backend x check, keyed in the report as ``hfexport_case(architecture, check)``.

The sweep is kept out of every other run (``pytest conformance``, ``make run``, ``-m ""``): its directory is
collected only when ``--coverage-sweep SCOPE`` is given or a path inside it is named on the command line.
Options (registered by ``conformance/conftest.py``, which every run of the suite loads first):

- ``--coverage-sweep types|all``: one class per model type (default scope), or every registered class;
- ``--coverage-only REGEX``: only the architectures whose class name, head or model type it finds;
- ``--coverage-executorch slice|all``: ExecuTorch cells for ``EXECUTORCH_SLICE`` only (default), or for every one;
- ``--coverage-timeout S``: seconds one cell may run (default 90; 0: none), ``cells.CellFailure`` at ``timeout``.

Architectures a committed build verdict holds not buildable under the installed versions (``verdicts``) get no
test; their count is printed in the session header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .enumerate import SCOPES, Architecture, architectures

HERE = Path(__file__).resolve().parent
CHECKS = ("export", "generation")
# ExecuTorch lowering costs tens of seconds per graph on 2 cores: by default a dozen common architectures.
EXECUTORCH_SLICE = frozenset(
    {
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "MistralForCausalLM",
        "PhiForCausalLM",
        "GPT2LMHeadModel",
        "Gemma3ForCausalLM",
        "BertForMaskedLM",
        "DistilBertForSequenceClassification",
        "T5ForConditionalGeneration",
        "ViTForImageClassification",
        "WhisperForConditionalGeneration",
        "Wav2Vec2ForCTC",
    }
)
DEFAULT_TIMEOUT = 90.0
_SELECTED = pytest.StashKey[tuple[list[Architecture], int]]()


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("coverage", "the coverage sweep over transformers' architectures (conformance.coverage)")
    group.addoption(
        "--coverage-sweep",
        choices=SCOPES,
        default=None,
        help="collect the coverage sweep: one class per model type (types) or every registered class (all)",
    )
    group.addoption("--coverage-only", metavar="REGEX", help="only architectures whose name, head or type matches")
    group.addoption(
        "--coverage-executorch",
        choices=("slice", "all"),
        default="slice",
        help="ExecuTorch cells for a dozen common architectures (slice, default) or for every one (all)",
    )
    group.addoption(
        "--coverage-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds one coverage cell may run (default {DEFAULT_TIMEOUT:.0f}; 0: no limit)",
    )


def scope(config: pytest.Config) -> str | None:
    """The sweep's scope when the sweep is asked for, else None: ``--coverage-sweep``, or ``types`` when a path
    inside ``conformance/coverage`` is named on the command line."""
    chosen = config.getoption("coverage_sweep", None)
    if chosen:
        return str(chosen)
    for arg in config.invocation_params.args:
        path = Path(str(arg).split("::", 1)[0])
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        if path.resolve().is_relative_to(HERE):
            return "types"
    return None


def ignore(collection_path: Path, config: pytest.Config) -> bool | None:
    """``pytest_ignore_collect``: the sweep's directory is left out unless the sweep is asked for."""
    if collection_path.resolve() == HERE and scope(config) is None:
        return True
    return None


def selected(config: pytest.Config) -> tuple[list[Architecture], int]:
    """The architectures to collect, and how many of the scope a committed verdict holds not buildable."""
    if _SELECTED not in config.stash:
        from .verdicts import current_verdicts

        archs = architectures(config.getoption("coverage_only", None), None, scope(config) or "types")
        unbuildable = current_verdicts()
        kept = [a for a in archs if f"{a.name}|{a.head}" not in unbuildable]
        config.stash[_SELECTED] = (kept, len(archs) - len(kept))
    return config.stash[_SELECTED]


def parametrize(metafunc: pytest.Metafunc) -> None:
    """``architecture`` over the selected architectures (generative ones only for ``test_generation``)."""
    if "architecture" not in metafunc.fixturenames:
        return
    check = metafunc.function.__name__.removeprefix("test_")
    archs, _ = selected(metafunc.config)
    if check == "generation":
        archs = [a for a in archs if a.generative]
    params = [
        pytest.param(a, id=a.name, marks=[pytest.mark.hfexport_case(a.name, check), pytest.mark.hfexport_coverage])
        for a in archs
    ]
    metafunc.parametrize("architecture", params)


def deselect(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ExecuTorch cells outside ``EXECUTORCH_SLICE`` (unless ``--coverage-executorch all``), and the
    placeholder pytest makes of a check no selected architecture has (``test_generation`` of a selection without
    a generative head), which would otherwise be a skip."""
    every = config.getoption("coverage_executorch", "slice") == "all"

    def outside(item: pytest.Item) -> bool:
        params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
        if "architecture" not in params:
            return False
        arch = params["architecture"]
        if not isinstance(arch, Architecture):
            return True
        return params.get("hfexport_backend") == "executorch" and not every and arch.name not in EXECUTORCH_SLICE

    dropped = [item for item in items if outside(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not outside(item)]


def header(config: pytest.Config) -> list[str]:
    """The session header's line on the sweep: scope, architectures collected, those held not buildable."""
    chosen = scope(config)
    if chosen is None:
        return []
    archs, unbuildable = selected(config)
    only = config.getoption("coverage_only", None)
    return [
        f"coverage sweep: scope {chosen}"
        + (f", only {only!r}" if only else "")
        + f": {len(archs)} architectures collected ({sum(a.generative for a in archs)} generative); {unbuildable} "
        "not buildable by the committed verdicts (docs/reports/coverage/builds.json), not collected"
    ]

"""The suite's generation check families for a model repo's ``ModelCase``: the same judging, on the repo's models.

A model repo that owns a causal LM, a speech or a vision-language model needs what the conformance suite judges
on its zoo, not only a plain export: the ``export_for_generation`` components against their eager submodules on
the calls a real ``generate()`` makes (``generation``), the tokens of ``generate()`` with every component served
by its artifact (``generation_tokens``), one decode graph serving 1 and 3 query tokens (``multi_token_decode``)
and the static-cache decode loop as a user writes it (``static_cache``). Each runs at the sample, at another
prompt length and on a left-padded batch of two where the case's inputs can be sized. The references and loops
are the suite's own (``pytest_hfexport.reference``, ``serving``, ``guide``, ``decoding``); a mismatch names the
first diverging module (``pytest_hfexport.localise``) and every check records one report row.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NEW_TOKENS = 8  # greedy tokens per generate() comparison: enough to cross prefill, decode and cache growth
QUERY_TOKENS = (1, 3)  # the multi-token decode graph's block sizes


@dataclass
class Components:
    """One ``export_for_generation`` of a case: the eager model, its sample, the saved and loaded components."""

    model: Any
    sample: dict[str, Any]
    paths: dict[str, Path] = field(default_factory=dict)
    runners: dict[str, Any] = field(default_factory=dict)
    programs: dict[str, Any] = field(default_factory=dict)  # empty when the artifacts came from the cache
    export_again: Any = None

    def program(self, name: str) -> Any:
        """The in-memory program of ``name`` (exported again when the artifacts came from the cache)."""
        if name not in self.programs:
            self.programs = self.export_again()
        return self.programs[name]


def input_sets(case: Any, model: Any) -> dict[str, dict[str, Any]]:
    """``sample``; ``other`` (another prompt length) and ``batch`` (two rows, the first left-padded by two
    tokens) where the case's inputs can be sized."""
    import torch

    sets = {"sample": case.sample_inputs(model)}
    if not case.sized:
        return sets
    batch, seq = case.sample
    sets["other"] = case.sample_inputs(model, batch, case.other[1])
    padded = case.sample_inputs(model, 2, case.other[1])
    mask = padded.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape[1] > 2:
        mask = mask.clone()
        mask[0, :2] = 0
        padded["attention_mask"] = mask
        sets["batch"] = padded
    return sets


@contextmanager
def _measured(case: Any, harness: Any, check: str) -> Iterator[Any]:
    """A ``Measurement`` for the check's report row; a failure in the block records its stage and message (a gap
    the implementation declares is not a measurement: it propagates as the plugin's ``unsupported``)."""
    from .adapters import Unsupported
    from .pipeline import ExportCheckError, Measurement

    m = Measurement(case.name, harness.backend, check, harness.implementation.name, harness.device)
    m.stage = "export"
    start = time.perf_counter()
    try:
        yield m
    except Unsupported:
        raise
    except ExportCheckError as exc:
        m.stage, m.message = exc.stage, str(exc)
        _record(harness, m, start)
        raise
    except AssertionError as exc:
        m.stage, m.message = "mismatch", str(exc)
        _record(harness, m, start)
        raise
    except Exception as exc:
        m.message = f"{type(exc).__name__}: {exc}"
        _record(harness, m, start)
        raise ExportCheckError(f"{case.name} on {harness.backend}: {m.message}", m.stage or "export", m) from exc
    m.stage = None
    _record(harness, m, start)


def _record(harness: Any, m: Any, start: float) -> None:
    m.seconds["total"] = time.perf_counter() - start
    harness.record(m)


def export_components(case: Any, harness: Any, m: Any, **options: Any) -> Components:
    """Export every component, save each, load each back from disk. Through the plugin's artifact cache when it
    is on (the checks of one case share an export, and a rerun reuses it); the programs are then exported again
    only if a mismatch needs them (``Components.program``)."""
    adapter = harness.implementation
    adapter.require("export_for_generation", harness.backend)
    model = case.model()
    parts = Components(model, case.sample_inputs(model))
    exporter = harness.exporter()
    config = harness.config(**{"dynamic": True, **dict(case.config)})  # generate() calls at every length

    def build(folder: Path) -> dict[str, Path]:
        m.stage = "export"
        parts.programs = dict(adapter.export_for_generation(exporter, model, parts.sample, config, **options))
        m.stage = "save"
        return {name: adapter.save(exporter, program, folder, name) for name, program in parts.programs.items()}

    if harness.cache is None:
        parts.paths = build(harness.directory())
    else:
        from .artifact_cache import export_key

        key = export_key(adapter, harness.backend, model, parts.sample, config, "export_for_generation", options)
        parts.paths, m.cached = harness.cache.get_or_build(key, build)
    parts.export_again = lambda: dict(adapter.export_for_generation(exporter, model, parts.sample, config, **options))
    m.stage = "load"
    parts.runners = {name: adapter.load(path) for name, path in parts.paths.items()}
    m.stage = "run"
    return parts


def judge(
    module: Any,
    call: Mapping[str, Any],
    runner: Any,
    parts: Components,
    name: str,
    harness: Any,
    case: Any,
    m: Any,
    label: str,
) -> None:
    """One component call against its eager submodule; a mismatch names the first diverging module."""
    from .compare import compare
    from .localise import Artifact, locate
    from .naming import flat_named
    from .pipeline import ExportMismatch
    from .reference import graph_kwargs, reference_call

    expected = reference_call(module, call)
    got = flat_named(runner(**copy.deepcopy(graph_kwargs(call))))
    result = compare(expected, got, harness.backend, tolerance=case.tolerance, label=label)
    m.results.append(result)
    if result.ok:
        return
    artifact = Artifact(harness.implementation.raw_artifact(parts.paths[name]), lambda: parts.program(name))
    found = locate(module, call, harness.backend, artifact, tolerance=case.tolerance)
    m.stage = "mismatch"
    raise ExportMismatch(f"{case.name}: {result.message()}\n{found.describe()}", "mismatch", m)


def check_generation(case: Any, harness: Any, settings: Any) -> Any:
    """Every component against its eager submodule on the calls generate() makes, at every input set."""
    from .reference import component_calls

    with _measured(case, harness, "generation") as m:
        parts = export_components(case, harness, m)
        for label, name, module, call in component_calls(parts.model, parts.runners, input_sets(case, parts.model)):
            judge(module, call, parts.runners[name], parts, name, harness, case, m, label)
        return m


def check_generation_tokens(case: Any, harness: Any, settings: Any) -> Any:
    """The model's own generate() with every component served by its artifact gives eager's greedy tokens."""
    from .reference import eager_tokens
    from .serving import served_tokens

    with _measured(case, harness, "generation_tokens") as m:
        parts = export_components(case, harness, m)
        for kind, inputs in input_sets(case, parts.model).items():
            got = served_tokens(parts.model, parts.runners, inputs, NEW_TOKENS)
            want = eager_tokens(parts.model, inputs, NEW_TOKENS)
            assert got.tolist() == want.tolist(), (
                f"generate() with every component served by its artifact, {kind} prompt: {got.tolist()}\n"
                f"eager generate(): {want.tolist()}"
            )
        return m


def check_multi_token_decode(case: Any, harness: Any, settings: Any) -> Any:
    """One decode graph serves 1 and 3 query tokens after the prompt, as eager does."""
    from .reference import decode_block_calls

    with _measured(case, harness, "multi_token_decode") as m:
        harness.implementation.require("multi_token_decode", harness.backend)
        parts = export_components(case, harness, m, multi_token_decode=True)
        for label, call in decode_block_calls(parts.model, input_sets(case, parts.model), QUERY_TOKENS):
            judge(parts.model, call, parts.runners["decode"], parts, "decode", harness, case, m, label)
        return m


def check_static_cache(case: Any, harness: Any, settings: Any) -> Any:
    """The static-cache decode graph driven by the guide's loop (prefill in blocks, then one token per call)
    matches eager generate() with a static cache: logits per step and the cache contents."""
    import transformers

    from .decoding import drive, schedule, static_reference
    from .guide import open_guide
    from .localise import Artifact, locate

    length = int(case.cache_len)
    with _measured(case, harness, "static_cache") as m:
        harness.implementation.require("static_cache", harness.backend)
        generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=length)
        parts = export_components(case, harness, m, multi_token_decode=True, generation_config=generation)
        raw = harness.implementation.raw_artifact(parts.paths["decode"])
        artifact = Artifact(raw, lambda: parts.program("decode"))

        def locator(call: Any) -> Any:
            return locate(parts.model, call, harness.backend, artifact, tolerance=case.tolerance)

        for kind, inputs in input_sets(case, parts.model).items():
            ref = static_reference(parts.model, inputs, NEW_TOKENS, length)
            session = open_guide(raw, harness.backend, length, batch=int(inputs["input_ids"].shape[0]))
            drive(session, ref, harness.backend, schedule(NEW_TOKENS), label=f"{kind} prompt, ", locator=locator)
        return m


GENERATION_CHECKS = {
    "generation": check_generation,
    "generation_tokens": check_generation_tokens,
    "multi_token_decode": check_multi_token_decode,
    "static_cache": check_static_cache,
}


def default_checks(model: Any) -> tuple[str, ...]:
    """What a model gets by default: every plain check, and the generation families where it can generate
    (decoder-only models also the static cache and multi-token decode)."""
    plain = ("export", "shapes", "unchanged")
    if not (hasattr(model, "can_generate") and model.can_generate()):
        return plain
    config = getattr(model, "config", None)
    multimodal = any(hasattr(config, k) for k in ("vision_config", "audio_config", "text_config"))
    text_decoder = not getattr(config, "is_encoder_decoder", False) and not multimodal
    extra = ("multi_token_decode", "static_cache") if text_decoder else ()
    return (*plain, "generation", "generation_tokens", *extra)

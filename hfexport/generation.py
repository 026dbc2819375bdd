"""Split a generative model into exportable components by watching one real ``generate()`` run.

``decompose_for_generation`` hooks the model and its parts (encoders found with
``get_encoder(modality=...)``, the language model from ``get_decoder()``, a
projector only under one of the conventional names, the LM head), runs
``generate`` once with greedy decoding, and keeps a deep copy of every call's
arguments at the moment of the call (the cache is mutated by later steps).
Because every submodule is hooked during that single run, encoders that
``generate`` calls before the prefill (LLaVA pre-encodes images in transformers
5.23) are captured too. No per-model glue: the split is read from which hooks fired.

Multi-token decode merges the decode steps into one call whose query axis holds
several tokens, so the exported decode graph keeps that axis symbolic.

A decode call gets the mask its exported graph is driven with, whatever generate() passed
(``decode_calls``). Static caches are built with full-length sliding layers while generate()
is watched (patch set "generation", see patching.sliding_window).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .decode_calls import (
    TOKEN_KEYS,
    accepts_attention_mask,
    explicit_mask,
    holds_one_position,
    merge_decode_calls,
    static_decode_call,
)
from .errors import HfExportError
from .onnx_int4 import tables_shared
from .patching import apply_patches
from .shapes import widen_batch

logger = logging.getLogger(__name__)

# A projector becomes its own component only under one of these names (a fixed list, docs/api.md).
MULTIMODAL_PROJECTOR_NAMES = ("multi_modal_projector", "connector", "embed_vision", "embed_audio")
ENCODER_MODALITIES = ("image", "audio")
# Arguments that only shape the Python return value or are re-derived inside the graph.
DROPPED_KWARGS = ("return_dict", "logits_to_keep", "output_attentions", "output_hidden_states_flag")

Components = dict[str, tuple[torch.nn.Module, dict[str, Any]]]


def _bind(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Positional and keyword arguments of one call, as a flat dict of parameter names.

    Positional values take the names of the forward's positional parameters in order (extra ones, for a
    ``*args`` forward, are not exportable inputs and are left out); keywords keep their own names.
    """
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in inspect.signature(module.forward).parameters.values() if p.kind in positional]
    return {**dict(zip(names, args)), **kwargs}


@contextlib.contextmanager
def record_calls(modules: Mapping[str, torch.nn.Module]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Log ``(name, deep-copied kwargs)`` for every forward call of the given modules, in call order."""
    log: list[tuple[str, dict[str, Any]]] = []
    handles = []
    for name, module in modules.items():

        def hook(mod, args, kwargs, name=name):
            log.append((name, copy.deepcopy(_bind(mod, args, kwargs))))

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield log
    finally:
        for handle in handles:
            handle.remove()


def _get_encoder(model: Any, modality: str | None) -> Any:
    """The model's encoder for ``modality`` (its only encoder for None), or None where it has none.

    transformers' ``get_encoder`` returns the model itself when nothing matches, refuses a ``modality`` keyword
    on older model classes, and raises on composite models without that tower: all of those mean "none".
    """
    kwargs = {"modality": modality} if modality else {}
    try:
        encoder = model.get_encoder(**kwargs)
    except (AttributeError, TypeError, NotImplementedError, ValueError):
        return None
    return None if encoder is model else encoder


def hook_targets(model: Any) -> dict[str, torch.nn.Module]:
    """The modules whose calls are recorded: the model and its generation-relevant parts."""
    targets: dict[str, torch.nn.Module] = {"model": model}
    seen = {id(model)}

    def add(name: str, module: Any) -> None:
        if isinstance(module, torch.nn.Module) and id(module) not in seen:
            targets[name] = module
            seen.add(id(module))

    is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    if is_encoder_decoder:
        add("encoder", _get_encoder(model, None))
    else:
        for modality in ENCODER_MODALITIES:
            add(f"{modality}_encoder", _get_encoder(model, modality))
        multimodal = any(k.endswith("_encoder") for k in targets)
        if multimodal:
            for root in (model, getattr(model, "base_model", None)):
                for name in MULTIMODAL_PROJECTOR_NAMES:
                    add(name, getattr(root, name, None) if root is not None else None)
            decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
            add("language_model", None if decoder is model else decoder)
            add("lm_head", model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None)
    return targets


def _clean(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k not in DROPPED_KWARGS}


def _row_major(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Top-level tensors of a multimodal component call as row-major copies.

    The calls of a VLM's parts are slices of larger tensors (the LM head gets the last position
    ``hidden[:, -1:]``, LLaVA's projector the features without their CLS row). torch.export traces
    a graph input with the sample's strides, and flattening such a view for a linear layer guards
    on its batch being 1: the artifact then refuses two images or two rows. Traced on a row-major
    copy (same values) the batch stays symbolic, and the graph still accepts strided inputs.
    """
    return {
        k: v.clone(memory_format=torch.contiguous_format)
        if isinstance(v, torch.Tensor) and v.layout == torch.strided
        else v
        for k, v in kwargs.items()
    }


def _generation_config(model: Any, generation_config: Any, new_tokens: int) -> Any:
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    config.max_new_tokens = new_tokens
    config.min_new_tokens = new_tokens
    config.do_sample = False
    config.num_beams = 1
    return config


def capture_generation_calls(
    model: Any, inputs: Mapping[str, Any], generation_config: Any = None, new_tokens: int = 2
) -> dict[str, list[dict[str, Any]]]:
    """Run generate once; return {target name: [kwargs of each call]} for every hooked module."""
    if not hasattr(model, "generate"):
        raise TypeError(f"{type(model).__name__} has no generate(); export_for_generation needs a generative model")
    config = _generation_config(model, generation_config, new_tokens)
    targets = hook_targets(model)
    was_training = model.training
    model.eval()
    try:
        # The "generation" patch set shapes the caches generate() builds into their exportable form
        # (patching.sliding_window); it is reverted when the run ends, also on errors.
        with torch.no_grad(), apply_patches("generation"), record_calls(targets) as log:
            model.generate(**copy.deepcopy(dict(inputs)), generation_config=config)
    except Exception as exc:
        raise HfExportError(
            f"generate() failed while capturing the components of {type(model).__name__}: "
            f"{type(exc).__name__}: {exc}. Check that the inputs are what generate() takes.",
            stage="eager",
        ) from exc
    finally:
        model.train(was_training)
    calls: dict[str, list[dict[str, Any]]] = {}
    for name, kwargs in log:
        calls.setdefault(name, []).append(kwargs)
    calls["__targets__"] = targets  # type: ignore[assignment]
    return calls


def decompose_for_generation(
    model: Any, inputs: Mapping[str, Any], generation_config: Any = None, multi_token_decode: bool = False
) -> Components:
    """``{component name: (submodule, kwargs)}`` captured from one real generate() run.

    Decoder-only and SSM models: ``prefill``, ``decode``. Encoder-decoder: ``encoder``,
    ``prefill``, ``decode``. Multimodal: ``image_encoder`` / ``audio_encoder``, a projector
    (only under a conventional name), ``language_model``, ``lm_head``, ``decode``.
    """
    # One decode step more than the trace needs: the one to start from when the first step's cache holds one
    # position (a one-token prompt, an encoder-decoder's start token), whose size-1 axis torch.export specialises.
    calls = capture_generation_calls(model, inputs, generation_config, 4 if multi_token_decode else 3)
    targets: dict[str, torch.nn.Module] = calls.pop("__targets__")  # type: ignore[assignment]
    top = calls.get("model", [])
    if len(top) < 2:
        raise HfExportError(
            f"generate() called {type(model).__name__}.forward {len(top)} time(s); a prefill and at "
            "least one decode step are needed (did generation stop at an EOS token?)",
            stage="eager",
        )
    masked = accepts_attention_mask(model)
    prefill, steps = explicit_mask(top[0], masked), [explicit_mask(step, masked) for step in top[1:]]
    user_mask = inputs.get("attention_mask") if isinstance(inputs.get("attention_mask"), torch.Tensor) else None
    block = 2 if multi_token_decode else 1  # a two-token step traces a decode graph that serves any block
    start = 1 if holds_one_position(steps[0]) and len(steps) > block else 0
    chosen = steps[start : start + block]
    decode = merge_decode_calls(chosen, user_mask) if multi_token_decode else static_decode_call(chosen[0], user_mask)

    components: Components = {}
    multimodal = any(name.endswith("_encoder") and name in calls for name in targets if name != "encoder")
    for name, module in targets.items():
        if name == "model" or name not in calls:
            continue
        if multimodal or name == "encoder":
            call = _clean(calls[name][0])
            # A VLM's language model gets no mask from generate() at batch 1: traced with the explicit one, so
            # that the graph serves a padded batch (the runners pass the ones mask where generate() gives none).
            if multimodal:
                call = _row_major(explicit_mask(call, accepts_attention_mask(module)))
            components[name] = (module, call)
    if not multimodal:
        components["prefill"] = (model, _clean(prefill))
    components["decode"] = (model, _clean(decode))
    return components


# -- export over the components --------------------------------------------------------


def _configs_by_component(exporter: Any, names: list[str], config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping) and "export_format" not in config:
        given = set(config)
        missing, unknown = sorted(set(names) - given), sorted(given - set(names))
        if missing or unknown:
            raise ValueError(
                "a per-component config dict must name every component exactly: "
                f"expected {sorted(names)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        return {name: exporter.resolve_config(config[name]) for name in names}
    resolved = exporter.resolve_config(config)
    return {name: resolved for name in names}


def _dynamic_cache_export(config: Any, generation_config: Any) -> bool:
    """A dynamic export of components that run with a dynamic cache (not a static one)."""
    from .shape_plan import ShapePlan

    configs = list(config.values()) if isinstance(config, Mapping) and "export_format" not in config else [config]
    dynamic = any(ShapePlan.of(c).automatic for c in configs if c is not None)
    return dynamic and getattr(generation_config, "cache_implementation", None) != "static"


def _samples_for_retrace(exporter: Any, config: Any, generation_config: Any, sample: dict[str, Any]) -> bool:
    """Widen ``sample`` in place for exporters whose lowering re-traces the graph; True: decode from two tokens.

    A decode step has query length 1; with batch 1 too, every ``batch * query`` product the graph
    flattens (linear layers, ``view(*shape, -1, head_dim)``) is 1, and ExecuTorch's lowering (its
    re-trace) specialises it: the graph then serves only batch 1 x 1 token, or fails to plan
    ('_ViewSpec is incompatible with its base'). So a batch-1 sample is widened to batch 2. With
    one query token the re-trace still broadcasts the query axis away in places (rotary tables of
    shape [batch, 1, dim], then a view whose head axis reads '2 // query', which fails to run), so
    the decode component is traced from a two-token step; the graph still serves one token.
    Dynamo and ONNX keep the size-oblivious trace of the given sample (a batch-2 sample there can
    add a 'batch != 1' guard). A static cache is sized for the sample's batch: left alone.
    """
    if not getattr(exporter, "widen_batch1_components", False) or not _dynamic_cache_export(config, generation_config):
        return False
    ids = next((v for k in TOKEN_KEYS if isinstance(v := sample.get(k), torch.Tensor)), None)
    if ids is not None and ids.shape[0] == 1:
        sample.update(widen_batch(sample))
        logger.info("export_for_generation: batch-1 sample widened to batch 2 for the lowering's re-trace")
    return True


def export_components(
    exporter: Any,
    model: Any,
    inputs: Mapping[str, Any],
    config: Any = None,
    generation_config: Any = None,
    multi_token_decode: bool = False,
) -> dict[str, Any]:
    """What ``HfExporter.export_for_generation`` does: decompose, then export each component."""
    if isinstance(config, Mapping) and "export_format" not in config:
        for value in config.values():  # validate the types before the (slow) generate run
            exporter.resolve_config(value)
    else:
        exporter.resolve_config(config)
    sample = dict(inputs)
    if _samples_for_retrace(exporter, config, generation_config, sample):
        multi_token_decode = True
    components = decompose_for_generation(model, sample, generation_config, multi_token_decode)
    configs = _configs_by_component(exporter, list(components), config)
    programs: dict[str, Any] = {}
    with tables_shared():  # prefill and decode hold one copy of each table quantized for the trace
        for name, (module, kwargs) in components.items():
            try:
                programs[name] = exporter.export(module, kwargs, config=configs[name])
            except HfExportError as exc:
                raise HfExportError(str(exc), stage=exc.stage, component=name) from exc
            except Exception as exc:
                raise HfExportError(f"{type(exc).__name__}: {exc}", stage="export", component=name) from exc
    return programs

"""Static KV cache with multi-token decode: one decode graph over a fixed-length cache serves the prompt
(empty cache), single tokens and blocks of 3, teacher-forced on eager generate()'s 32 greedy tokens.

* ``static_cache``: the guide's loop, written here against the backend's own runtime (exactly the guide's
  inputs: input_ids, a bool mask over the cache slots, position_ids, the cache rebuilt from the artifact);
  after every call the logits, the greedy token and the caller's cache equal eager's, and the runtime wrote
  the cache in place where the guide says it does (Dynamo, ONNX Runtime);
* ``static_cache_batch``: the same at batch 2 with left padding;
* ``static_cache_in_place``: the implementation's own decode loop over the same artifact: same tokens and
  cache, and every step's cache written by the runtime into the caller's memory (addresses read from the
  runtime's own output objects; a loop that copies results back fails);
* ``static_prefill``: the ``prefill`` component of the same export on the call a static-cache generate() makes
  (its mask as generate() gives it, per layer type where the model has ``layer_types``), against eager.

A loop's call whose logits differ names the first diverging module of the decode graph (eager runs the same
step with its own cache before it; ``pytest_hfexport.decoding``).
"""

import pytest

from conformance.conftest import MAX_CACHE_LEN, NEW_TOKENS, entry_params, static_options
from conformance.judge import assert_matches
from pytest_hfexport.decoding import drive, schedule, static_reference
from pytest_hfexport.guide import open_guide
from pytest_hfexport.localise import locate
from pytest_hfexport.reference import capture_generation


def static_export(exported, adapter, backend, entry):
    adapter.require("static_cache", backend)
    return exported(entry, generation=True, **static_options())


def decode_locator(result, backend):
    """The step locator of the decode graph: the first module of the model whose output the artifact computes
    differently on a loop's call (run only on a mismatch)."""
    artifact = result.artifact("decode")
    return lambda call: locate(result.model, call, backend, artifact)


def run_guide(result, adapter, backend, kind):
    inputs = result.entry.input_sets(result.model, (kind,))[kind]
    ref = static_reference(result.model, inputs, NEW_TOKENS, MAX_CACHE_LEN)
    session = open_guide(
        adapter.raw_artifact(result.paths["decode"]), backend, MAX_CACHE_LEN, batch=inputs["input_ids"].shape[0]
    )
    locator = decode_locator(result, backend)
    drive(session, ref, backend, schedule(NEW_TOKENS), label=f"{kind} prompt, ", locator=locator)


@pytest.mark.parametrize("entry", entry_params("static_cache"))
def test_guide_loop_matches_eager_generate(entry, exported, hfexport_implementation, hfexport_backend):
    result = static_export(exported, hfexport_implementation, hfexport_backend, entry)
    run_guide(result, hfexport_implementation, hfexport_backend, "sample")


@pytest.mark.parametrize("entry", entry_params("static_cache", key="static_cache_batch"))
def test_guide_loop_serves_a_padded_batch(entry, exported, hfexport_implementation, hfexport_backend):
    result = static_export(exported, hfexport_implementation, hfexport_backend, entry)
    run_guide(result, hfexport_implementation, hfexport_backend, "batch")


@pytest.mark.parametrize("entry", entry_params("static_cache", key="static_cache_in_place"))
def test_implementation_loop_updates_the_cache_in_place(entry, exported, hfexport_implementation, hfexport_backend):
    adapter = hfexport_implementation
    result = static_export(exported, adapter, hfexport_backend, entry)
    adapter.require("decode_loop", hfexport_backend)
    adapter.require("decode_loop_in_place", hfexport_backend)
    loop = adapter.decode_loop(result.paths["decode"], hfexport_backend, MAX_CACHE_LEN)
    loop.reset()
    ref = static_reference(result.model, result.inputs, NEW_TOKENS, MAX_CACHE_LEN)
    drive(
        loop,
        ref,
        hfexport_backend,
        schedule(NEW_TOKENS),
        label=f"{adapter.name}'s loop, ",
        locator=decode_locator(result, hfexport_backend),
    )


@pytest.mark.parametrize("entry", entry_params("static_cache", key="static_prefill"))
def test_static_prefill_matches_eager_on_generates_call(entry, exported, hfexport_implementation, hfexport_backend):
    result = static_export(exported, hfexport_implementation, hfexport_backend, entry)
    capture = capture_generation(result.model, result.inputs, 2, static_options()["generation_config"])
    assert_matches(
        result.model,
        capture.call("prefill"),
        result.runners["prefill"],
        hfexport_backend,
        "static-cache prefill on generate()'s call",
        artifact=result.artifact("prefill"),
    )

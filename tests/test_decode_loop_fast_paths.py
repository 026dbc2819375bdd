"""The decode loops' fast paths: what a step skips once an earlier step has checked the same inputs.

Dynamo: the program's graph on flat tensors after one checked call per input signature. What must hold:
the fast path gives the tokens, logits and cache of the program's own module; a call whose input signature
the loop has not seen goes through the module's range checks and guards (a loop that skipped them for every
call, ``UncheckedLoop`` below, runs a wrong-sized mask without the guard's message); the write addresses come
from the graph's own results and equal the caller's cache tensors.

ONNX Runtime: a step over the same input tensors as the last (new values written into them) runs the last
step's IO binding again. What must hold: the same tokens and cache as a loop that binds every step; a step over
other tensors binds anew (``StaleBindingLoop``, which never does, gives other tokens or overruns the cache).
"""

from __future__ import annotations

import pytest
import torch

from helpers import static_decode_export

from hfexport.errors import HfExportError
from hfexport.runtime.decode import DynamoDecodeLoop, causal_mask
from hfexport.runtime.onnxruntime import OrtDecodeLoop


@pytest.fixture(scope="module")
def decode_program():
    return static_decode_export("dynamo")


@pytest.fixture(scope="module")
def onnx_decode_program():
    return static_decode_export("onnx")


class ModuleOnlyLoop(DynamoDecodeLoop):
    """Every call through the program's module (the reference for the fast path)."""

    def step(self, input_ids, attention_mask, position_ids):
        self._checked.clear()
        return super().step(input_ids, attention_mask, position_ids)


class UncheckedLoop(DynamoDecodeLoop):
    """The fault: every call on the flat graph, no signature ever checked by the module."""

    def step(self, input_ids, attention_mask, position_ids):
        self._checked.add(tuple((tuple(t.shape), t.dtype) for t in (input_ids, attention_mask, position_ids)))
        return super().step(input_ids, attention_mask, position_ids)


def test_fast_path_gives_the_modules_tokens_logits_and_cache(decode_program):
    program, prompt = decode_program
    fast, reference = DynamoDecodeLoop(program), ModuleOnlyLoop(program)
    assert fast.generate(prompt, 12).tokens == reference.generate(prompt, 12).tokens
    for name, tensor in fast.cache_tensors().items():
        torch.testing.assert_close(tensor, reference.cache_tensors()[name], rtol=0, atol=0)
    # Step by step, the logits too (one more token on both caches).
    ids, position = torch.tensor([[7]]), torch.tensor([[6 + 12]])
    mask = causal_mask(position[0], fast.max_cache_len, fast.mask_dtype)
    torch.testing.assert_close(fast.step(ids, mask, position), reference.step(ids, mask, position), rtol=0, atol=0)


def test_fast_path_is_taken_and_reports_the_graphs_own_writes(decode_program):
    program, prompt = decode_program
    loop = DynamoDecodeLoop(program)
    calls = []
    original = loop.flat_graph.graph_module.forward
    loop.flat_graph.graph_module.forward = lambda *a: calls.append(1) or original(*a)
    loop.generate(prompt, 8)
    assert len(calls) == 6  # the prompt and the first one-token step are checked by the module
    writes = loop.runtime_writes()
    assert writes and set(writes) <= set(loop.cache_tensors())
    assert all(writes[n] == loop.cache_tensors()[n].data_ptr() for n in writes)


def test_fast_path_runs_in_inference_mode_and_leaves_the_cache_usable_outside_it(decode_program):
    """The fast path skips autograd bookkeeping (inference mode, not only no_grad); the cache it writes in place
    stays an ordinary tensor, so a reset or a second generation outside inference mode still works."""
    program, prompt = decode_program
    loop = DynamoDecodeLoop(program)
    seen = []
    original = loop.flat_graph.graph_module.forward
    loop.flat_graph.graph_module.forward = lambda *a: seen.append(torch.is_inference_mode_enabled()) or original(*a)
    first = loop.generate(prompt, 6).tokens
    assert seen and all(seen)
    assert not any(t.is_inference() for t in loop.cache_tensors().values())
    assert loop.generate(prompt, 6).tokens == first  # reset() zeroes the cache outside inference mode


@pytest.mark.parametrize("loop_class, checked", [(DynamoDecodeLoop, True), (UncheckedLoop, False)])
def test_a_new_signature_is_checked_by_the_module(decode_program, loop_class, checked):
    program, prompt = decode_program
    loop = loop_class(program)
    loop.generate(prompt, 4)
    ids, position = torch.tensor([[7]]), torch.tensor([[10]])
    short_mask = causal_mask(position[0], loop.max_cache_len - 1, loop.mask_dtype)  # one slot short
    if checked:
        with pytest.raises(Exception, match="Guard failed"):
            loop.step(ids, short_mask, position)
    else:
        try:
            loop.step(ids, short_mask, position)
        except Exception as error:  # whatever the kernels say, it is not the program's guard
            assert "Guard failed" not in str(error)


class RebindingLoop(OrtDecodeLoop):
    """Binds every step (the reference for the kept binding)."""

    def step(self, input_ids, attention_mask, position_ids):
        self._binding = None
        return super().step(input_ids, attention_mask, position_ids)


class StaleBindingLoop(OrtDecodeLoop):
    """The fault: the first binding is run for every later step, whatever tensors the step gets."""

    def step(self, input_ids, attention_mask, position_ids):
        if self._binding is not None:
            return self._binding.run()["logits"]
        return super().step(input_ids, attention_mask, position_ids)


def test_ort_loop_keeps_its_binding_and_gives_the_rebinding_loops_tokens(onnx_decode_program):
    program, prompt = onnx_decode_program
    loop, reference = OrtDecodeLoop(program, max_cache_len=32), RebindingLoop(program, max_cache_len=32)
    bindings = []
    original = loop.runner.bind_shared
    loop.runner.bind_shared = lambda *a: bindings.append(1) or original(*a)
    tokens = loop.generate(prompt, 12).tokens
    assert tokens == reference.generate(prompt, 12).tokens
    assert len(bindings) == 2  # the prompt's tensors, then the step tensors the loop refills
    for name, tensor in loop.cache_tensors().items():
        torch.testing.assert_close(tensor, reference.cache_tensors()[name], rtol=0, atol=0)
    assert loop.runtime_writes() == {n: t.data_ptr() for n, t in loop.cache_tensors().items()}
    try:  # the prompt's binding run again: 6 more slots per step, past the cache's end after a few steps
        stale = StaleBindingLoop(program, max_cache_len=32).generate(prompt, 12).tokens
    except HfExportError as error:
        stale = str(error)
    assert stale != tokens


@pytest.mark.parametrize("threads", [1, 2])
def test_ort_loop_session_options_reach_the_session(onnx_decode_program, threads):
    """The loop's ``session_options`` are the session's (a loop that dropped them would run ORT's defaults)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    loop = OrtDecodeLoop(onnx_decode_program[0], max_cache_len=32, session_options=options)
    assert loop.runner.session.get_session_options().intra_op_num_threads == threads

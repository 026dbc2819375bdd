"""The export-time Mamba/FalconMamba mixer (hfexport/patching/ssm.py): one graph for every length, on a
filled state too, without the ops XNNPACK cannot serialise over two dynamic axes."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from helpers import assert_matches, eager

from hfexport import DynamoConfig, DynamoExporter
from hfexport.caches import clone_cache
from hfexport.patching import apply_patches, ssm

TOL = 1e-4  # tiny models; the backend bar is for the conformance zoo


def _tiny(kind: str):
    torch.manual_seed(0)
    common = dict(
        hidden_size=16, state_size=4, num_hidden_layers=1, vocab_size=32, expand=2, conv_kernel=4, use_mambapy=False
    )
    if kind == "mamba":
        return tf.MambaForCausalLM(tf.MambaConfig(**common)).eval()
    return tf.FalconMambaForCausalLM(tf.FalconMambaConfig(**common)).eval()


def _prefill_cache(model, ids):
    cache = tf.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, cache_params=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_plain_export_serves_prompts_shorter_than_the_conv_kernel(kind):
    model = _tiny(kind)
    program = DynamoExporter().export(model, {"input_ids": torch.randint(3, 32, (1, 6))}, DynamoConfig(dynamic=True))
    for seq in (1, 2, 3, 9):
        inputs = {"input_ids": torch.randint(3, 32, (2, seq))}
        assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=TOL, label=f"seq={seq}")


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_decode_graph_traced_on_two_tokens_serves_one(kind):
    model = _tiny(kind)
    prompt = torch.randint(3, 32, (1, 5))
    sample = {
        "input_ids": torch.randint(3, 32, (1, 2)),
        "cache_params": _prefill_cache(model, prompt),
        "use_cache": True,
    }
    program = DynamoExporter().export(model, sample, DynamoConfig(dynamic=True))
    for batch in (1, 2):
        cache = _prefill_cache(model, prompt.repeat(batch, 1))
        step = torch.randint(3, 32, (batch, 1))
        expected = eager(model, {"input_ids": step, "cache_params": clone_cache(cache), "use_cache": True})
        got = program.module()(input_ids=step, cache_params=clone_cache(cache))
        assert_matches(expected, got, "dynamo", tolerance=TOL, label=f"1 token, batch {batch}")


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_patched_mixer_serves_a_block_of_tokens_as_eager_does(kind):
    """Eager's scan restarts the recurrent state for a call of several tokens (only one token continues it): the
    patched mixer does the same, so a multi-token decode graph equals eager's call at every query length (it
    continued the state before, equal to single steps and 5.7 off eager's own block call on the zoo's Mamba)."""
    model = _tiny(kind)
    prompt, block = torch.randint(3, 32, (2, 3)), torch.randint(3, 32, (2, 3))
    with torch.no_grad():
        eager_cache = _prefill_cache(model, prompt)
        expected = model(input_ids=block, cache_params=eager_cache, use_cache=True).logits
        steps_cache = _prefill_cache(model, prompt)
        steps = [model(input_ids=block[:, i : i + 1], cache_params=steps_cache, use_cache=True).logits
                 for i in range(3)]
        with apply_patches("dynamo"):
            patched_cache = _prefill_cache(model, prompt)
            got = model(input_ids=block, cache_params=patched_cache, use_cache=True).logits
            one_cache = _prefill_cache(model, prompt)
            one = model(input_ids=block[:, :1], cache_params=one_cache, use_cache=True).logits
    apart = float((expected - torch.cat(steps, dim=1)).abs().max())  # a block against single steps, in eager
    error = float((got - expected).abs().max())
    assert error * 100 < apart, f"the patched block is {error:.1e} from eager's block call, which is {apart:.1e} from steps"
    torch.testing.assert_close(one, steps[0], atol=TOL, rtol=0)
    for ours, theirs in zip(patched_cache.layers, eager_cache.layers):
        torch.testing.assert_close(ours.conv_states[0], theirs.conv_states[0], atol=TOL, rtol=0)
        torch.testing.assert_close(ours.recurrent_states[0], theirs.recurrent_states[0], atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_multi_token_decode_graph_equals_eager_at_one_and_three_tokens(kind):
    """export_for_generation(multi_token_decode=True): the decode graph on a 3-token block equals eager's call with
    the same arguments, and on one token eager's step."""
    import copy

    from hfexport.runtime import runner_for
    from pytest_hfexport.naming import flat_named
    from pytest_hfexport.reference import capture_generation, graph_kwargs, merged_decode_call, reference_call

    model = _tiny(kind)
    inputs = {"input_ids": torch.randint(3, 32, (1, 5))}
    decode = DynamoExporter().export_for_generation(model, inputs, DynamoConfig(dynamic=True),
                                                    multi_token_decode=True)["decode"]
    run = runner_for(decode, "dynamo")
    steps = capture_generation(model, inputs, 4).calls["model"][1:4]
    for call in (steps[0], merged_decode_call(steps)):
        expected = reference_call(model, call)["logits"]
        got = flat_named(run(**copy.deepcopy(graph_kwargs(call))))["logits"]
        # 2e-6: float32 reordering on these logits (within 1); the former block-as-steps graph was 4.2e-5 off (mamba)
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=0)


def _sequential_scan(x, dt, A, B, C, h):
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1), h


def test_closed_form_scan_accumulates_prefix_sums_precisely():
    """Long decays in float32 prefix sums lose short segments' exponents to cancellation; float64 keeps them."""
    torch.manual_seed(0)
    b, L, d, n = 1, 256, 4, 8
    x, B, C = torch.randn(b, L, d), torch.randn(b, L, n), torch.randn(b, L, n)
    dt = torch.rand(b, L, d) * 0.2  # slow decay: long prefix sums, short segments still weigh
    A = -torch.arange(1, n + 1, dtype=torch.float32).expand(d, n).contiguous()
    h0 = torch.randn(b, d, n)
    ref_y, ref_h = _sequential_scan(*(t.double() for t in (x, dt, A, B, C, h0)))
    y, h = ssm.closed_form_scan(x, dt, A, B, C, None, None, h0)
    # float64 prefix sums: 3.6e-7 here; float32 ones: 3.5e-6
    torch.testing.assert_close(y.double(), ref_y, atol=1e-6, rtol=0)
    torch.testing.assert_close(h.double(), ref_h, atol=1e-6, rtol=0)


def _xnnpack_blockers(program) -> list[str]:
    """Nodes XNNPACK's static reshape would refuse: conv1d (lowered as unsqueeze/conv2d/squeeze) or a trailing
    (un)squeeze of a tensor with more than one symbolic axis."""
    bad = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if "convolution" in name or "conv1d" in name:
            bad.append(name)
        if "unsqueeze" in name or "squeeze" in name:
            val = node.meta.get("val")
            dim = node.args[1] if len(node.args) > 1 else None
            if isinstance(val, torch.Tensor) and isinstance(dim, int) and dim in (-1, val.dim() - 1):
                symbolic = sum(not isinstance(s, int) for s in val.shape)
                if symbolic > 1:
                    bad.append(f"{name} over {symbolic} symbolic axes")
    return bad


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_executorch_mixer_has_nothing_xnnpack_refuses(kind):
    model = _tiny(kind)
    sample = {"input_ids": torch.randint(3, 32, (2, 6))}
    with apply_patches("executorch"):  # the ExecuTorch exporter installs these on top of the dynamo ones
        program = DynamoExporter().export(model, sample, DynamoConfig(dynamic=True))
    assert not _xnnpack_blockers(program)
    inputs = {"input_ids": torch.randint(3, 32, (2, 3))}
    assert_matches(eager(model, inputs), program.module()(**inputs), "dynamo", tolerance=TOL)


@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_executorch_decode_graph_has_no_sym_ite(kind):
    """ExecuTorch's edge verifier refuses torch.sym_ite (an AssertionError while lowering the decode graph);
    slicing the conv window at a start of unknown sign put one in per layer."""
    model = _tiny(kind)
    sample = {
        "input_ids": torch.randint(3, 32, (2, 2)),
        "cache_params": _prefill_cache(model, torch.randint(3, 32, (2, 5))),
        "use_cache": True,
    }
    pytest.importorskip("executorch")
    from executorch.exir import EdgeCompileConfig, to_edge

    from hfexport import ExecutorchConfig, ExecutorchExporter
    from hfexport.executorch import fixes as executorch_fixes

    exporter, config = ExecutorchExporter(), ExecutorchConfig(dynamic=True)
    program = exporter.trace(model, sample, config)
    with executorch_fixes.lowering_patches(), exporter.tracer.mode(exporter.shape_plan(config), config):
        edge = to_edge(program, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    targets = {str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"}
    assert not any("sym_ite" in t for t in targets), sorted(targets)

"""Selective-scan SSMs (Mamba, FalconMamba): one branch-free mixer for every sequence length.

Eager Mamba has three size-dependent paths that torch.export cannot keep symbolic:

* the causal conv1d pads the prompt by ``conv_kernel - 1`` and the cache pads a prompt shorter
  than ``conv_kernel`` (``Guard failed: input_ids.size()[1] >= 4``);
* the mixer picks a recurrent one-token update when ``seq_len == 1`` on a filled cache and the
  full scan otherwise (a decode graph traced on two tokens guards ``input_ids.size()[1] != 1``);
* without the CUDA kernels, the scan is a Python loop over the sequence (unrolled by export).

The export-time mixer below has no size branch. The conv always sees ``conv_kernel`` tokens of
left context (the cached conv state, or zeros for a prompt) and is written as ``conv_kernel``
shifted multiply-adds. The linear recurrence h_t = a_t * h_{t-1} + b_t (a_t = exp(dt * A) in
(0, 1]) has the closed form h_t = exp(L_t) h_0 + sum_{s<=t} exp(L_t - L_s) b_s with L the
cumulative sum of log a_t; the [t, s] weights under a causal mask are exact, stable (every
exponent is <= 0) and shape-polymorphic, and with h_0 the cached state it serves one decode
token and a block of tokens alike. It costs O(seq^2) memory per state channel, which is fine
for export-time sample sizes and decode steps.

A block of several tokens on a filled cache is computed as eager computes it: eager's scan
(``mamba_selective_scan``) has no initial state, so it restarts the recurrent state from zeros for
any call of more than one token, and only a one-token call continues it. The graph does the same
(``_continues_state``), so a multi-token decode graph equals eager's call on every query length;
a block's logits then differ from eager's token-by-token decoding (5.7 on the zoo's Mamba), as
eager's own do. Decode Mamba one token at a time for that.

Layout: state-expanded tensors are [batch, seq, state, channels] and no tensor that carries both
the batch and the sequence symbols is unsqueezed on its last axis or reshaped by XNNPACK (its
static reshape takes one dynamic axis: "reshape only supports 1 dynamic dimension"), and there
is no conv1d (XNNPACK wraps it in unsqueeze/conv2d/squeeze over the same two symbols).

Both can go once the modeling code has an exportable scan and a size-independent decode path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import register_patch
from .renames import CACHE_ARGUMENT, STATE_GETTERS

# The prefix sums of log(a_t); float64 where the backend has it (see closed_form_scan).
SCAN_ACCUMULATOR_DTYPE = torch.float64


def _trailing_one(x: torch.Tensor) -> torch.Tensor:
    """``x[..., None]`` as a view (not ``unsqueeze(-1)``): XNNPACK leaves a symbolic view to the
    portable kernels but delegates a trailing unsqueeze it cannot serialise over two symbols."""
    return x.unflatten(-1, (x.shape[-1], 1))


def _masked(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the padding positions of ``hidden`` [batch, seq, channels] (eager's apply_mask_to_padding_states)."""
    if attention_mask is None:
        return hidden
    return (hidden * _trailing_one(attention_mask.to(hidden.dtype))).to(hidden.dtype)


def causal_depthwise_conv(full: torch.Tensor, conv: torch.nn.Conv1d, seq_len: Any) -> torch.Tensor:
    """The last ``seq_len`` outputs [batch, seq, channels] of the depthwise causal conv over ``full``
    [batch, channels, past + seq], which holds at least ``kernel - 1`` tokens of left context.

    F.conv1d without padding, as eager's decode step runs it (the same sums, so the same rounding).
    """
    weight = conv.weight
    out = F.conv1d(full.to(weight.dtype), weight, conv.bias, groups=weight.shape[0])
    return out[..., -seq_len:].transpose(1, 2).contiguous()  # dense: linear layers then flatten without a guard


def _shifted_multiply_add_conv(original):
    """XNNPACK runs conv1d as unsqueeze/conv2d/squeeze, and the squeeze over batch and sequence symbols fails to
    serialise ('reshape only supports 1 dynamic dimension'); the same conv as ``kernel`` shifted multiply-adds."""

    def conv(full: torch.Tensor, conv: torch.nn.Conv1d, seq_len: Any) -> torch.Tensor:
        weight = conv.weight[:, 0, :]  # [channels, kernel]
        kernel = weight.shape[-1]
        full = full.to(weight.dtype).transpose(1, 2).contiguous()  # [b, tokens, d]
        start = full.shape[1] - seq_len - (kernel - 1)
        # The window starts inside ``full`` (it holds kernel - 1 tokens of context); said so, the slices
        # need no sign test (torch.sym_ite), which ExecuTorch's edge verifier refuses.
        torch._check(start >= 0)
        out = full.narrow(1, start, seq_len) * weight[:, 0]
        for j in range(1, kernel):
            out = out + full.narrow(1, start + j, seq_len) * weight[:, j]
        return out + conv.bias if conv.bias is not None else out

    return conv


def closed_form_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba's selective scan, exactly, without a loop: (y [b, L, d], last state [b, d, n]).

    x, dt (already softplus'ed), z: [b, L, d]; A: [d, n]; B, C: [b, L, n]; D: [d];
    initial_state: [b, d, n] or None (zeros). Computed in float32 like eager.
    """
    input_dtype = x.dtype
    seq = x.shape[1]
    x, dt = x.float(), dt.float()
    a_t = A.float().t()  # [n, d]
    log_a = dt[:, :, None, :] * a_t  # [b, L, n, d], <= 0
    b_term = (dt * x)[:, :, None, :] * _trailing_one(B.float())  # [b, L, n, d]
    # L_t, accumulated in SCAN_ACCUMULATOR_DTYPE: L_t - L_s cancels, and float32 would lose the short
    # segments' exponents to the rounding of long prefix sums
    cum = torch.cumsum(log_a.to(SCAN_ACCUMULATOR_DTYPE), dim=1)
    # [b, t, s, n, d]: exp(L_t - L_s) for s <= t, 0 above the diagonal (clamped first so it cannot overflow)
    diff = (cum[:, :, None] - cum[:, None]).float()
    steps = torch.arange(seq, device=x.device)
    causal = (steps[:, None, None, None] >= steps[:, None, None]).to(diff.dtype)  # [t, s, 1, 1]
    weights = diff.clamp(max=0.0).exp() * causal
    states = (weights * b_term[:, None]).sum(dim=2)  # h_t: [b, L, n, d]
    if initial_state is not None:
        states = states + cum.float().exp() * initial_state.float().transpose(1, 2)[:, None]
    y = (states * _trailing_one(C.float())).sum(dim=2)  # [b, L, d]
    if D is not None:
        y = y + x * D.float()
    if z is not None:
        y = y * F.silu(z.float())
    last = states.select(1, -1).transpose(1, 2).contiguous()  # [b, d, n], dense like the cache it is copied into
    return y.to(input_dtype), last


def _continues_state(hidden_states: torch.Tensor) -> torch.Tensor:
    """1.0 for a one-token call, 0.0 for more: eager continues the recurrent state only for one token (its
    multi-token scan starts from zeros). A tensor computed from the symbolic query length, so no guard."""
    ones = hidden_states.new_ones(hidden_states.shape[1], dtype=torch.float32)
    return (ones.sum() == 1).to(torch.float32)


def _state(cache: Any, layer_idx: int, kind: str) -> torch.Tensor | None:
    """The layer's ``kind`` ("conv" or "recurrent") state, None before its first update (renames.STATE_GETTERS)."""
    if STATE_GETTERS.applies:
        return getattr(cache, f"get_{kind}_state")(layer_idx, state_idx=0)
    if not cache.has_previous_state(layer_idx):
        return None
    return getattr(cache.layers[layer_idx], f"{kind}_states")[0]


def _uncount_padding(cache: Any, layer_idx: int, padding: int) -> None:
    """The prompt's left zero padding is no tokens: transformers 5.25 counts every column update_conv_state
    sees (LinearAttentionLayer.cumulative_length_linear, a tensor new in 5.25); earlier layers have no count."""
    layers = getattr(cache, "layers", None) or []
    counter = getattr(layers[layer_idx], "cumulative_length_linear", None) if layer_idx < len(layers) else None
    if isinstance(counter, torch.Tensor):
        counter.sub_(padding)


def _mixer_forward(original):
    """MambaMixer/FalconMambaMixer.forward branch on seq_len == 1 and pad short prompts; one size-free path."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        # The block passes the cache as `cache` from transformers 5.25 on (renames.CACHE_ARGUMENT).
        cache_params = kwargs.pop(CACHE_ARGUMENT.new, None) if cache_params is None else cache_params
        if self.training and cache_params is None:  # the fused kernel path: not an export path
            return original(self, hidden_states, attention_mask=attention_mask, **kwargs)
        seq_len = hidden_states.shape[1]
        dtype = hidden_states.dtype
        kernel = self.conv_kernel_size

        hidden_states = _masked(hidden_states, attention_mask)
        projected = self.in_proj(hidden_states)  # [b, L, 2d]
        x, gate = projected.chunk(2, dim=-1)

        # 1. causal conv over [conv state or zeros, new tokens]; the cache keeps the last `kernel` tokens
        recurrent_state = None
        if cache_params is not None:
            recurrent_state = _state(cache_params, self.layer_idx, "recurrent")
            if recurrent_state is not None:
                recurrent_state = recurrent_state * _continues_state(hidden_states)
            x_cl = x.transpose(1, 2)  # the cache's [b, d, tokens] layout
            prompt = _state(cache_params, self.layer_idx, "conv") is None
            if prompt:
                x_cl = F.pad(x_cl, (kernel, 0))  # a prompt: zero left context, always >= kernel long
            full = cache_params.update_conv_state(x_cl, self.layer_idx, conv_kernel_size=kernel)
            if prompt:
                _uncount_padding(cache_params, self.layer_idx, kernel)
        else:
            full = F.pad(x.transpose(1, 2), (kernel - 1, 0))
        x = self.act(causal_depthwise_conv(full, self.conv1d, seq_len)).to(dtype)  # [b, L, d]

        # 2. input-dependent dt, B, C (FalconMamba RMS-normalises them)
        x = _masked(x, attention_mask)
        time_step, B, C = torch.split(
            self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        if hasattr(self, "dt_layernorm"):
            time_step, B, C = self.dt_layernorm(time_step), self.b_layernorm(B), self.c_layernorm(C)
        if hasattr(self.config, "_is_quantized"):
            dt = self.dt_proj(time_step) - self.dt_proj.bias
        else:  # dense first: a matmul that flattens a slice of the last axis guards seq_len != 1
            dt = F.linear(time_step.contiguous(), self.dt_proj.weight)  # [b, L, d]
        if self.dt_proj.bias is not None:
            dt = dt + self.dt_proj.bias.float()
        dt = F.softplus(dt)

        # 3. selective scan from the cached state (zeros for a prompt)
        A = -torch.exp(self.A_log.float())
        y, last = closed_form_scan(x, dt, A, B, C, self.D, gate, recurrent_state)
        if cache_params is not None:
            cache_params.update_recurrent_state(last, self.layer_idx)
        return self.out_proj(y.to(dtype))

    return forward


register_patch(
    "dynamo",
    "transformers.models.mamba.modeling_mamba.MambaMixer.forward",
    "transformers.models.falcon_mamba.modeling_falcon_mamba.FalconMambaMixer.forward",
    reason=(
        "Mamba mixers branch on seq_len == 1 (decode) and pad prompts shorter than conv_kernel, and their torch scan "
        "is a loop over seq_len; a branch-free conv + closed-form scan from the cached state"
    ),
)(_mixer_forward)


register_patch(
    "executorch",
    "hfexport.patching.ssm.causal_depthwise_conv",
)(_shifted_multiply_add_conv)


def _float32_accumulator(original):
    """XNNPACK has no float64 kernels: accumulate the scan's prefix sums in float32 (ExecuTorch's bar is looser)."""
    return torch.float32


register_patch("executorch", "hfexport.patching.ssm.SCAN_ACCUMULATOR_DTYPE")(_float32_accumulator)

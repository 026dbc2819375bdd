"""Selective-scan SSMs (Mamba): a sequence loop that torch.export would unroll.

Without the CUDA kernels, transformers' Mamba scan is a Python loop over the
sequence (the associative-scan path is disabled while exporting), so the
exported program is pinned to the sample's length. The linear recurrence
h_t = a_t * h_{t-1} + b_t has the closed form h_t = sum_{s<=t} exp(L_t - L_s) b_s
with L the cumulative sum of log a_t (a_t = exp(dt * A) > 0). Computing the
[t, s] weights with a causal mask is exact, stable (every exponent is <= 0) and
shape-polymorphic. It costs O(seq^2) memory per state channel, which is fine
for export-time sample sizes and decode steps; it can go once the modeling code
has an exportable scan.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import register_patch


def _closed_form_scan(original):
    """Mamba's fallback selective scan loops over seq_len; replace with an exact masked segment sum."""

    def scan(
        hidden_states,
        dt,
        A,
        B,
        C,
        D=None,
        z=None,
        delta_bias=None,
        delta_softplus=False,
        return_last_state=False,
        use_mambapy=False,
        use_associative_scan=False,
        **kwargs,
    ):
        input_dtype = hidden_states.dtype
        if delta_bias is not None:
            dt = dt + delta_bias.to(dt.dtype)[..., None]
        if delta_softplus:
            dt = F.softplus(dt)
        dt = dt.float()
        log_a = A.float()[None, :, None, :] * dt[:, :, :, None]  # [b, d, L, n], <= 0
        b_term = dt[:, :, :, None] * B.float().transpose(1, 2)[:, None, :, :] * hidden_states.float()[:, :, :, None]
        cum = torch.cumsum(log_a, dim=2)  # [b, d, L, n]
        seq = hidden_states.shape[-1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=hidden_states.device).tril()
        diff = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # [b, d, t, s, n]
        weights = torch.where(causal[None, None, :, :, None], diff, torch.full_like(diff, float("-inf"))).exp()
        states = (weights * b_term[:, :, None, :, :]).sum(dim=3)  # h_t: [b, d, L, n]
        out = (states * C.float().transpose(1, 2)[:, None, :, :]).sum(-1)  # [b, d, L]
        if D is not None:
            out = out + hidden_states.float() * D.float()[None, :, None]
        if z is not None:
            out = out * F.silu(z.float())
        out = out.to(input_dtype)
        if return_last_state:
            return out, states[:, :, -1]
        return out

    return scan


register_patch(
    "dynamo",
    "transformers.models.mamba.modeling_mamba.mamba_selective_scan",
    "transformers.models.falcon_mamba.modeling_falcon_mamba.mamba_selective_scan",
    reason="Mamba's torch fallback scan is a Python loop over seq_len (unrolled by export); closed-form masked scan",
)(_closed_form_scan)

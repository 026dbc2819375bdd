"""The judge's own eager arithmetic of each quantization scheme the export API defines.

A quantized artifact is checked twice: exactly (within a measured tolerance) against eager running the same
quantization, which this module computes from each scheme's definition without the implementation's code, and
against eager float32 by the logits' signal-to-quantization-noise ratio (SQNR, in dB). The schemes
(``SCHEMES``: the backends each applies to, and its default group size) are the API's contract, written
down here once. Every scheme quantizes ``nn.Linear`` layers, never ``MultiheadAttention``'s ``out_proj``
(a ``NonDynamicallyQuantizableLinear`` whose weight attention reads itself):

* ``int8``: every ``nn.Linear`` weight rounded to int8 with one symmetric scale per output channel
  (``max|w| / 127``); float activations.
* ``int4``: ONNX Runtime's ``MatMulNBits``: every ``nn.Linear`` weight in blocks of ``group_size`` along the
  input axis (a last partial block padded with zeros), symmetric 4 bits with ``scale = v / -8`` for the
  block's largest-magnitude value ``v``, values clamped to [-8, 7] as MLAS rounds them (``_int4_matmul_nbits``);
  float activations. Every ``nn.Embedding`` table too, in the same blocks along its width
  (``GatherBlockQuantized``): the one scheme that quantizes embeddings, as a tied table is the head's weight.
* ``8da4w``: every ``nn.Linear`` whose input width ``group_size`` divides: int4 weights per group with the
  symmetric scale ``max|w| / 7.5``, values in [-8, 7]; its input quantized at run time per token to int8,
  asymmetric (``scale = (max(x, 0) - min(x, 0)) / 255``, zero point ``-128 - round(min(x, 0) / scale)``).
  Values are rounded as ``round(v * (1 / scale))`` (half to even), as torchao does: ``v / scale`` rounds a
  value a float32 ulp below a half the other way. The weight scales the product uses are rounded to bfloat16,
  as XNNPACK's blockwise int4 kernels store them (with float32 scales eager is 2e-3 off the artifact on llama,
  with bfloat16 ones 9e-8).
* ``8da8w``: every ``nn.Linear``: int8 weights with one symmetric scale per output channel, ``max|w| / 127.5``,
  values in [-128, 127] (float32 scales: XNNPACK's qc8w kernels keep them so); its input quantized per token as
  in ``8da4w``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .compare import Tolerance


@dataclass(frozen=True)
class Scheme:
    backends: tuple[str, ...]
    default_group_size: int | None
    # Activations quantized per token at run time: at a real model's depth an artifact cannot match eager element
    # for element (an ulp between two float sums flips an int8 rounding the later layers amplify).
    dynamic_activations: bool = False


SCHEMES: dict[str, Scheme] = {
    "int8": Scheme(("dynamo", "onnx", "executorch"), None),
    "int4": Scheme(("onnx",), 32),
    "8da4w": Scheme(("executorch",), 32, dynamic_activations=True),
    "8da8w": Scheme(("executorch",), None, dynamic_activations=True),
}


# (scheme, backend) -> tolerance of a quantized artifact against eager with the same quantization; absent: the
# backend's float32 one, where the artifact computes the same float arithmetic. FACTOR (10) times the worst errors
# measured over the zoo: ``python -m conformance.quantization_errors``.
TOLERANCE: dict[tuple[str, str], Tolerance] = {
    # worst abs 3.6e-7 (falcon_mamba), rel 9.5e-6 (t5): linear(x, q) * scale rounds otherwise than eager's linear
    ("int8", "dynamo"): Tolerance(3.6e-6, 9.5e-5),
    # worst abs 6.3e-6 (siglip_classifier, qwen3): XNNPACK's integer kernels sum in another order
    ("8da4w", "executorch"): Tolerance(6.3e-5, 1.8e-4),
}


def schemes_for(backend: str) -> list[str]:
    return [name for name, scheme in SCHEMES.items() if backend in scheme.backends]


def _int8_per_channel(weight: Any) -> Any:
    import torch

    scale = (weight.abs().amax(dim=1, keepdim=True) / 127).clamp(min=torch.finfo(weight.dtype).tiny)
    return torch.round(weight / scale).clamp(-127, 127) * scale


def _blocks(weight: Any, group_size: int) -> tuple[Any, int]:
    """``weight`` [out, in] as [out, blocks, group_size], zero-padded along the input axis; and the pad."""
    import torch

    out_features, in_features = weight.shape
    pad = -in_features % group_size
    padded = torch.nn.functional.pad(weight, (0, pad)) if pad else weight
    return padded.reshape(out_features, -1, group_size), pad


def _unblock(blocks: Any, shape: Any, pad: int) -> Any:
    flat = blocks.reshape(shape[0], -1)
    return flat[:, : flat.shape[1] - pad] if pad else flat


def _int4_matmul_nbits(weight: Any, group_size: int) -> Any:
    """MLAS's blockwise symmetric int4: ``scale = v / -8`` with ``v`` the block's maximum if its magnitude exceeds
    the minimum's, else the minimum (so +a and -a give -a); ``q = clamp(roundf(w * (1 / scale) + 8), 0, 15) - 8``
    in float32, ``roundf`` rounding half away from zero; adding the zero point before rounding is part of the
    arithmetic (a value a float32 ulp below -0.5 becomes 7.5 and rounds to 8)."""
    import torch

    blocks, pad = _blocks(weight, group_size)
    low, high = blocks.amin(dim=-1, keepdim=True), blocks.amax(dim=-1, keepdim=True)
    largest = torch.where(high.abs() > low.abs(), high, low)  # a tie (+a and -a) takes the negative one
    scale = largest / -8
    reciprocal = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / torch.where(scale == 0, 1.0, scale))
    shifted = blocks * reciprocal + 8
    rounded = torch.round(shifted)
    rounded = torch.where(shifted - torch.floor(shifted) == 0.5, torch.floor(shifted) + 1, rounded)
    q = rounded.clamp(0, 15) - 8
    return _unblock(q * scale, weight.shape, pad)


def _int4_symmetric_groups(weight: Any, group_size: int) -> Any:
    import torch

    blocks, pad = _blocks(weight, group_size)
    scale = (blocks.abs().amax(dim=-1, keepdim=True) / 7.5).clamp(min=torch.finfo(weight.dtype).eps)
    q = torch.round(blocks * (1.0 / scale)).clamp(-8, 7)
    return _unblock(q * scale.to(torch.bfloat16).to(weight.dtype), weight.shape, pad)


def _int8_symmetric_per_channel(weight: Any) -> Any:
    import torch

    scale = (weight.abs().amax(dim=1, keepdim=True) / 127.5).clamp(min=torch.finfo(weight.dtype).eps)
    return torch.round(weight * (1.0 / scale)).clamp(-128, 127) * scale


def _int8_per_token_asymmetric(x: Any) -> Any:
    import torch

    low = x.amin(dim=-1, keepdim=True).clamp(max=0)
    high = x.amax(dim=-1, keepdim=True).clamp(min=0)
    scale = ((high - low) / 255).clamp(min=torch.finfo(x.dtype).eps)
    zero_point = (-128 - torch.round(low / scale)).clamp(-128, 127)
    q = (torch.round(x * (1.0 / scale)) + zero_point).clamp(-128, 127)
    return (q - zero_point) * scale


def quantized_copy(model: Any, scheme: str, group_size: int | None = None) -> Any:
    """A copy of ``model`` computing ``scheme`` in eager: weights replaced by their dequantized values (the
    original model untouched), and for ``8da4w``/``8da8w`` each quantized layer's input fake-quantized per
    token."""
    import torch

    if scheme not in SCHEMES:
        raise KeyError(f"no quantization scheme {scheme!r}; schemes: {sorted(SCHEMES)}")
    size = group_size if group_size is not None else SCHEMES[scheme].default_group_size
    copied = copy.deepcopy(model)
    done: set[int] = set()
    for module in copied.modules():
        if (
            not isinstance(module, torch.nn.Linear)
            or isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear)
            or id(module) in done
            or not module.weight.is_floating_point()
        ):
            continue
        done.add(id(module))
        weight = module.weight.detach()
        if size is None:  # one scale per output channel
            new = _int8_symmetric_per_channel(weight) if scheme == "8da8w" else _int8_per_channel(weight)
        elif scheme == "int4":
            new = _int4_matmul_nbits(weight, size)
        elif module.in_features % size == 0:
            new = _int4_symmetric_groups(weight, size)
        else:
            continue
        if SCHEMES[scheme].dynamic_activations:
            module.register_forward_pre_hook(lambda m, args: (_int8_per_token_asymmetric(args[0]), *args[1:]))
        # A new parameter: a weight tied to an embedding is the embedding's own business (below).
        module.weight = torch.nn.Parameter(new.to(weight.dtype), requires_grad=False)
    if scheme == "int4" and size is not None:
        for module in copied.modules():
            if isinstance(module, torch.nn.Embedding) and module.weight.is_floating_point() and id(module) not in done:
                done.add(id(module))
                weight = module.weight.detach()
                new = _int4_matmul_nbits(weight, size).to(weight.dtype)
                module.weight = torch.nn.Parameter(new, requires_grad=False)
    return copied


def sqnr_db(reference: Any, got: Any) -> float:
    """Signal-to-quantization-noise ratio of ``got`` against ``reference``, in dB (inf when they are equal)."""
    import torch

    reference, got = torch.as_tensor(reference).double(), torch.as_tensor(got).double()
    noise = (reference - got).pow(2).sum().item()
    signal = reference.pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def first_output(outputs: Mapping[str, Any]) -> tuple[str, Any]:
    name = next(iter(outputs))
    return name, outputs[name]

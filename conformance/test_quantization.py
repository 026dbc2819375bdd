"""Quantized exports: every weight scheme of the API on every backend that carries it.

Each zoo entry is exported with ``quantization=<scheme>`` (dynamic, as the plain export) and judged twice at every
input set, from the saved artifact:

* against eager running the same quantization, rebuilt by the judge from the scheme's definition
  (``pytest_hfexport.quantized_reference``), within the scheme's measured tolerance: the backend's float32 one
  where the artifact computes the same float arithmetic (``int8``, ``int4``), a measured one where the backend's
  integer kernels round activations their own way (``8da4w`` and ``8da8w`` on XNNPACK). At a real model's size
  (the ``realsize`` tier) a scheme that quantizes activations at run time cannot match element for element: an ulp
  between XNNPACK's and eager's float sums flips an int8 rounding that the later layers carry (eager against
  itself with each linear's input moved by 2^-22 is as far apart: ``quantization_errors``' nudge). There the first
  output must agree with eager's by the SQNR measured for this entry and scheme, less 3 dB (``AGREEMENT_FLOOR``):
  a wrong group size or float activations land below it;
* against eager float32 by the first output's SQNR, which must reach the floor measured for this entry and scheme
  (what quantizing this model costs, less 3 dB; the models' weight scales differ too much for one floor per
  scheme: tiny T5's int4 logits sit at 2 dB, llama's at 19).

``python -m conformance.quantization_errors`` prints the errors these bars come from.
"""

from __future__ import annotations

import copy

import pytest

from conformance.conftest import entry_params
from conformance.judge import assert_matches
from pytest_hfexport.naming import flat_named
from pytest_hfexport.quantized_reference import SCHEMES, TOLERANCE, first_output, quantized_copy, sqnr_db
from pytest_hfexport.reference import graph_kwargs, reference_call

# (scheme, entry) -> the lowest SQNR (dB) of the first output against eager float32 over the backends and input
# sets, less 3 dB: ``python -m conformance.quantization_errors`` prints this table.
SQNR_FLOOR: dict[tuple[str, str], float] = {
    ("int8", "bart"): 31,
    ("int4", "bart"): 6,
    ("8da4w", "bart"): 5,
    ("int8", "bert"): 73,
    ("int4", "bert"): 17,
    ("8da4w", "bert"): 48,
    ("int8", "falcon_mamba"): 33,
    ("int4", "falcon_mamba"): 9,
    ("8da4w", "falcon_mamba"): 9,
    ("int8", "funnel"): 42,
    ("int4", "funnel"): 15,
    ("8da4w", "funnel"): 19,
    ("int8", "gemma3"): 31,
    ("int4", "gemma3"): 6,
    ("8da4w", "gemma3"): 6,
    ("int8", "gemma3_mqa"): 32,
    ("int4", "gemma3_mqa"): 9,
    ("8da4w", "gemma3_mqa"): 11,
    ("int8", "gpt2"): 42,
    ("int4", "gpt2"): 13,
    ("8da4w", "gpt2"): 18,
    ("int8", "llama"): 39,
    ("int4", "llama"): 14,
    ("8da4w", "llama"): 14,
    ("int8", "llava"): 34,
    ("int4", "llava"): 11,
    ("8da4w", "llava"): 9,
    ("int8", "mamba"): 29,
    ("int4", "mamba"): 6,
    ("8da4w", "mamba"): 5,
    ("int8", "mbart"): 21,
    ("int4", "mbart"): 1,
    ("8da4w", "mbart"): 1,
    ("int8", "mistral"): 39,
    ("int4", "mistral"): 14,
    ("8da4w", "mistral"): 14,
    ("int8", "mistral_sliding"): 39,
    ("int4", "mistral_sliding"): 14,
    ("8da4w", "mistral_sliding"): 14,
    ("int8", "mixtral"): 37,
    ("int4", "mixtral"): 10,
    ("8da4w", "mixtral"): 12,
    ("int8", "phi3"): 39,
    ("int4", "phi3"): 10,
    ("8da4w", "phi3"): 12,
    ("int8", "qwen2"): 39,
    ("int4", "qwen2"): 13,
    ("8da4w", "qwen2"): 15,
    ("int8", "qwen2_sliding"): 39,
    ("int4", "qwen2_sliding"): 13,
    ("8da4w", "qwen2_sliding"): 15,
    ("int8", "qwen2_vl"): 36,
    ("int4", "qwen2_vl"): 13,
    ("8da4w", "qwen2_vl"): 13,
    ("int8", "qwen3"): 39,
    ("int4", "qwen3"): 14,
    ("8da4w", "qwen3"): 14,
    ("int8", "qwen3_moe"): 39,
    ("int4", "qwen3_moe"): 10,
    ("8da4w", "qwen3_moe"): 12,
    ("int8", "roberta"): 73,
    ("int4", "roberta"): 17,
    ("8da4w", "roberta"): 49,
    ("int8", "siglip_classifier"): 43,
    ("int4", "siglip_classifier"): 11,
    ("8da4w", "siglip_classifier"): 10,
    ("int8", "smollm2_135m"): 27,
    ("int4", "smollm2_135m"): 5,
    ("8da4w", "smollm2_135m"): 5,
    ("8da8w", "smollm2_135m"): 23,
    ("int8", "whisper_base"): 30,
    ("int4", "whisper_base"): 8,
    ("8da4w", "whisper_base"): 9,
    ("8da8w", "whisper_base"): 28,
    ("int8", "qwen3_0_6b"): 26,
    ("int4", "qwen3_0_6b"): 5,
    ("int8", "t5_small"): 30,
    ("int4", "t5_small"): 9,
    ("8da4w", "t5_small"): 7,
    ("8da8w", "t5_small"): 29,
    ("int8", "switch_transformers"): 32,
    ("int4", "switch_transformers"): 7,
    ("8da4w", "switch_transformers"): 6,
    ("int8", "t5"): 7,
    ("int4", "t5"): -2,
    ("8da4w", "t5"): -4,
    ("int8", "vision_encoder_decoder"): 41,
    ("int4", "vision_encoder_decoder"): 12,
    ("8da4w", "vision_encoder_decoder"): 17,
    ("int8", "vit"): 59,
    ("int4", "vit"): 34,
    ("8da4w", "vit"): 32,
    ("int8", "whisper"): 25,
    ("int4", "whisper"): 4,
    ("8da4w", "whisper"): 6,
    ("int8", "whisper_uneven"): 22,
    ("int4", "whisper_uneven"): 2,
    ("8da4w", "whisper_uneven"): 12,
    ("int8", "sweep_gemma2"): 32,
    ("int8", "sweep_cohere"): 34,
    ("int8", "sweep_gpt_neox"): 36,
    ("int8", "sweep_olmo2"): 35,
    ("int4", "sweep_gemma2"): 8,
    ("int4", "sweep_cohere"): 4,
    ("int4", "sweep_gpt_neox"): 13,
    ("int4", "sweep_olmo2"): 9,
    ("8da4w", "sweep_gemma2"): 6,
    ("8da4w", "sweep_cohere"): 9,
    ("8da4w", "sweep_gpt_neox"): 11,
    ("8da4w", "sweep_olmo2"): 8,
    ("8da8w", "llama"): 37,
    ("8da8w", "qwen3"): 37,
    ("8da8w", "qwen2"): 36,
    ("8da8w", "mistral"): 37,
    ("8da8w", "mistral_sliding"): 37,
    ("8da8w", "qwen2_sliding"): 36,
    ("8da8w", "phi3"): 37,
    ("8da8w", "gemma3"): 29,
    ("8da8w", "gemma3_mqa"): 29,
    ("8da8w", "qwen3_moe"): 35,
    ("8da8w", "mixtral"): 37,
    ("8da8w", "gpt2"): 39,
    ("8da8w", "mamba"): 25,
    ("8da8w", "falcon_mamba"): 30,
    ("8da8w", "bert"): 71,
    ("8da8w", "roberta"): 68,
    ("8da8w", "funnel"): 38,
    ("8da8w", "siglip_classifier"): 33,
    ("8da8w", "vit"): 54,
    ("8da8w", "t5"): 1,
    ("8da8w", "switch_transformers"): 30,
    ("8da8w", "bart"): 25,
    ("8da8w", "mbart"): 12,
    ("8da8w", "whisper"): 25,
    ("8da8w", "whisper_uneven"): 13,
    ("8da8w", "vision_encoder_decoder"): 38,
    ("8da8w", "sweep_gemma2"): 26,
    ("8da8w", "sweep_cohere"): 29,
    ("8da8w", "sweep_gpt_neox"): 35,
    ("8da8w", "sweep_olmo2"): 31,
    ("8da8w", "llava"): 33,
    ("8da8w", "qwen2_vl"): 34,
}


# (scheme, entry) -> the lowest SQNR (dB) of the first output against eager with the same quantization, less 3 dB,
# for the cells ``judged_by_agreement``: ``python -m conformance.quantization_errors`` prints this table.
AGREEMENT_FLOOR: dict[tuple[str, str], float] = {
    ("8da4w", "smollm2_135m"): 32,
    ("8da8w", "smollm2_135m"): 35,
    ("8da4w", "whisper_base"): 31,
    ("8da8w", "whisper_base"): 31,
    ("8da4w", "t5_small"): 33,
    ("8da8w", "t5_small"): 32,
}
# Cells of the realsize tier with no measured floor, and why: the tier fails them for want of one.
UNMEASURED: dict[tuple[str, str], str] = {
    (scheme, "qwen3_0_6b"): "its plain ExecuTorch export at the default bounds (batch 8, 2048 tokens) plans 22.0 GiB "
    "of activations: loading it on a 24 GiB machine gets the process killed"
    for scheme in ("8da4w", "8da8w")
}


def judged_by_agreement(scheme: str, entry) -> bool:
    """Whether this cell is judged against eager with the same quantization by SQNR, not element by element."""
    return SCHEMES[scheme].dynamic_activations and entry.tier == "realsize"


def judge_quantized(entry, scheme, exported, backend, adapter):
    adapter.require("quantization", backend)
    result = exported(entry, config={"dynamic": True, "quantization": scheme})
    reference = quantized_copy(result.model, scheme)
    for label, inputs in entry.input_sets(result.model).items():
        labelled = f"{scheme}, {label}"
        got_all = flat_named(result.runner(**copy.deepcopy(graph_kwargs(inputs))))
        if judged_by_agreement(scheme, entry):
            name, same = first_output(flat_named(reference_call(reference, inputs)))
            floor = AGREEMENT_FLOOR.get((scheme, entry.name))
            assert floor is not None, (
                f"no measured agreement floor for {scheme} on {entry.name}: python -m conformance.quantization_errors "
                f"--entries {entry.name} --schemes {scheme} prints it"
            )
            agreement = sqnr_db(same, got_all[name])
            assert agreement >= floor, (
                f"{name} of the {scheme} artifact is {agreement:.1f} dB from eager {scheme} ({labelled}); "
                f"it agreed to {floor + 3:.1f} dB on {entry.name} when measured"
            )
        else:
            assert_matches(
                reference,
                inputs,
                result.runner,
                backend,
                labelled,
                artifact=result.artifact(),
                tolerance=TOLERANCE.get((scheme, backend)),
            )
        name, expected = first_output(flat_named(reference_call(result.model, inputs)))
        got = got_all[name]
        floor = SQNR_FLOOR.get((scheme, entry.name))
        assert floor is not None, (
            f"no measured SQNR floor for {scheme} on {entry.name}: python -m conformance.quantization_errors "
            f"--entries {entry.name} --schemes {scheme} prints it"
        )
        sqnr = sqnr_db(expected, got)
        assert sqnr >= floor, (
            f"{name} of the {scheme} artifact is {sqnr:.1f} dB from eager float32 ({labelled}); "
            f"{scheme} reached {floor + 3:.1f} dB on {entry.name} when measured"
        )


def _test_for(scheme: str):
    @pytest.mark.hfexport_backend(*SCHEMES[scheme].backends)
    @pytest.mark.parametrize("entry", entry_params("export", key=f"quantization_{scheme}"))
    def test(entry, exported, hfexport_backend, hfexport_implementation):
        judge_quantized(entry, scheme, exported, hfexport_backend, hfexport_implementation)

    test.__doc__ = f"The {scheme} export matches eager {scheme} and keeps the scheme's SQNR against float32."
    return test


test_int8_export_matches_eager_int8 = _test_for("int8")
test_int4_export_matches_eager_int4 = _test_for("int4")
test_8da4w_export_matches_eager_8da4w = _test_for("8da4w")
test_8da8w_export_matches_eager_8da8w = _test_for("8da8w")

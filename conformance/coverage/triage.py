"""What each of hfexport's measured coverage failures means: a structural limit, or the next thing to fix.

A failing cell is matched by its architecture name and backend (regular expressions, searched) and by its
stage and message (``cause``, searched in ``stage: message``). ``structural`` entries fail for a reason no
exporter can remove (the model's forward draws random numbers, so no artifact can equal one eager run; the
runtime has no kernel for an op); ``fix`` entries are hfexport defects, with what the analysis found, so they
become a fix with a zoo entry that keeps it fixed. The report lists every failing cell with its entry, and
each one no entry matches as not triaged: a new failure is never silently counted as understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STRUCTURAL, FIX = "structural", "fix"


@dataclass(frozen=True)
class Triage:
    arch: str
    backend: str
    cause: str
    kind: str
    reason: str

    def matches(self, record: dict[str, Any]) -> bool:
        text = f"{record.get('stage', '')}: {record.get('message', '')}"
        return bool(
            re.search(self.arch, record.get("arch", ""))
            and re.search(self.backend, record.get("backend", ""))
            and re.search(self.cause, text)
        )


TRIAGE: tuple[Triage, ...] = (
    Triage(
        r"^(ViTMAEModel|ViTMAEForPreTraining|VitsModel)$",
        "dynamo",
        r"mismatch|Guard failed",
        STRUCTURAL,
        "the forward draws random numbers (ViTMAE's patch masking noise, VITS's flow noise): two eager runs "
        "differ, so no artifact can equal one of them; the batch-2 retrace's check against eager fails for the "
        "same reason, so VITS keeps its batch-1 program",
    ),
    Triage(
        r"^(ViTMAEModel|ViTMAEForPreTraining|VitsModel)$",
        "onnx",
        r"NOT_IMPLEMENTED.*Random(Uniform|Normal)Like",
        STRUCTURAL,
        "ONNX Runtime 1.32 has no CPU kernel for RandomUniformLike / RandomNormalLike at opset 22; the forward "
        "is random anyway",
    ),
    Triage(
        r"^PaliGemma",
        "",
        r"mismatch",
        FIX,
        "the tiny text config has use_bidirectional_attention=True: eager passes no mask and SDPA attends "
        "bidirectionally, but under tracing create_causal_mask materialises a causal mask, so the graph attends "
        "causally (decoder layer 1 differs by 0.04, plain torch.export too). The export must build the mask "
        "eager's attention actually applies",
    ),
    Triage(
        r"^ReformerModel",
        "",
        r"ReformerDynamicCache",
        FIX,
        "Reformer returns its own ReformerDynamicCache (not a transformers Cache subclass), which has no pytree "
        "registration: register it, or bind use_cache=False for a plain export",
    ),
    Triage(
        r"^FastSpeech2Conformer",
        "",
        r"GuardOnDataDependentSymNode",
        FIX,
        "the length regulator repeats each phoneme by its predicted duration, so the spectrogram length is a tensor "
        "value; the trace guards on it. Needs those sizes kept as unbacked symbols (torch._check'd) through the "
        "decoder",
    ),
    Triage(
        r"^Rwkv",
        "",
        r"input_ids.size\(\)\[1\] ==|input 'input_ids' has shape",
        FIX,
        "rwkv_linear_attention_cpu runs the WKV recurrence as a Python loop over the sequence, unrolled by the trace "
        "into one length's graph. The recurrence must be traced as a scan (the way the SSM patches handle Mamba's "
        "selective scan) for a dynamic sequence",
    ),
    Triage(
        r"^(LED|Longformer)",
        "",
        r"GuardOnDataDependentSymNode",
        FIX,
        "Longformer's attention (LED's too) branches on is_index_global_attn.flatten().any().item() and chunks with "
        "as_strided sizes that follow from it: control flow on tensor values. Needs the global-attention branch "
        "as torch.cond (or a patch that always takes the general path)",
    ),
    Triage(
        r"^Parakeet",
        "",
        r"decoder_input_ids.size\(\)\[1\] ==|input 'decoder_input_ids' has shape",
        FIX,
        "the RNN-T prediction network is an nn.LSTM, which torch.export decomposes into one cell per time step: the "
        "graph is the sample's decoder length (3). Needs the LSTM traced as a loop over a symbolic length",
    ),
    Triage(
        r"^DeepseekV4",
        "dynamo",
        r"vr must not be None",
        FIX,
        "the decode component exports and saves, but torch.export.load of the saved program fails in torch's "
        "deserializer: a symbol of its shape environment (s92) has no value range. The same with the batch-2 "
        "retrace off; the in-memory program is not affected. Needs the symbol's range kept when saving (or the "
        "symbol that lacks one found and replaced before save)",
    ),
    Triage(
        r"^MuseGlimmerTextModel$",
        "onnx",
        r"mismatch",
        FIX,
        "ONNX Runtime's last_hidden_state differs from eager by 8.2e-4 (atol 1e-4) at the sample itself while the "
        "Dynamo program matches exactly: a translation or an ORT fusion computes some op differently (candidates: "
        "its two RMSNorm forms, torch.pow(mean, -0.5) and rsqrt). Not yet located",
    ),
    Triage(
        r"^ProphetNet",
        "dynamo",
        r"input_ids.size\(\)\[1\] \+ past_key_values",
        FIX,
        "the plain export passes; the decode component's trace pins prompt plus cache length (guard input_ids "
        "length + cache length == 7), so generation stops at its second step. Where ProphetNet's n-gram "
        "self-attention fixes that length is not yet located",
    ),
    Triage(
        r"^ProphetNet",
        "onnx",
        r"Cannot find a compatible OpOverload for aten.sub",
        FIX,
        "torch.onnx's decomposition pass retraces the program and finds no aten.sub overload for one of its calls "
        "(the arguments' types, a SymInt or scalar operand, not yet identified)",
    ),
    Triage(
        r"^(NemotronAsrStreaming|Nemotron3_5Asr)ForRNNT$",
        "",
        r"decoder_input_ids",
        FIX,
        "the same RNN-T prediction network as Parakeet's: an nn.LSTM unrolled over the sample's decoder length (3), "
        "so the ONNX graph refuses 4 decoder tokens and the Dynamo program guards decoder_input_ids.size()[1] == 3 "
        "(the batch-2 retrace's batch guard, which functionalisation used to bring back, is dropped for good now)",
    ),
    Triage(
        r"^PixtralVisionModel$",
        "",
        r"pixel_values.size\(\)\[0\] == 1|shape \(1, 16, 32\) != eager \(1, 32, 32\)",
        FIX,
        "the forward loops in Python over the images of the batch (zip(patch_embeds, image_sizes)) and concatenates "
        "their patches into one sequence, so the trace is one image's: Dynamo guards batch == 1 and the ONNX graph "
        "returns the first image's 16 patches where eager returns both images' 32. Needs a patch that flattens the "
        "patches of equally sized images without the loop",
    ),
    Triage(
        r"^Aimv2Model$",
        "",
        r"pixel_values.size\(\)\[0\] == 1|logits_per_image|running Add node",
        FIX,
        "the batch-1 sample's batch stays in the graph, not yet located: the Dynamo program guards batch == 1 (the "
        "batch-2 retrace was not kept) and ONNX Runtime fails to broadcast an Add at batch 2",
    ),
    Triage(
        r"^AfmoeForCausalLM$",
        "onnx",
        r"mismatch",
        FIX,
        "ONNX Runtime's logits differ by 7.5e-2 at the sample and its greedy tokens differ, while the Dynamo program "
        "matches eager in both: a routed MoE whose top-k choice flips on a last-bit difference would do this; not "
        "yet located",
    ),
    Triage(
        r"^MuseSparkTextModel$",
        "onnx",
        r"non-finite values differ",
        FIX,
        "eager's last_hidden_state holds non-finite values at the tiny random weights, and ONNX Runtime's do not "
        "sit at the same positions (the Dynamo program matches eager, NaNs included): which op overflows "
        "differently is not yet located",
    ),
    Triage(
        r"^Llama4TextModel$",
        "onnx",
        r"ConversionError: Error when translating node %unsqueeze",
        FIX,
        "torch.onnx's translation of one aten.unsqueeze (of a slice, in Llama 4's chunked attention mask) fails; "
        "the Dynamo program passes. The operand that the translation refuses is not yet identified",
    ),
    Triage(
        r"^Ovis2ForConditionalGeneration$",
        "",
        r"GuardOnDataDependentSymNode",
        FIX,
        "the trace stops at a guard on a data-dependent value, Eq(u1, 1), in the multimodal forward (the peer "
        "stops at the same guard); where Ovis2 branches on a tensor value is not yet located",
    ),
    Triage(
        r"^UnivNetModel$",
        "",
        r"SymIntArrayRef expected to contain only concrete integers",
        FIX,
        "the location-variable convolution unfolds its padded input with Tensor.unfold at sizes that follow the "
        "spectrogram length, and a kernel on that path accepts only concrete sizes (the peer fails the same "
        "way). Needs the windows built with index arithmetic (as_strided or gather) on a symbolic length",
    ),
)


def triage(record: dict[str, Any]) -> Triage | None:
    """The first entry that explains this failing cell, or None."""
    return next((entry for entry in TRIAGE if entry.matches(record)), None)

"""The specialist tools realsize.py measures hfexport against, each fed the same random-weight checkpoint.

- ONNX Runtime: onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder``) turns the
  ``save_pretrained`` folder into ``model.onnx`` + ``genai_config.json``; ``onnxruntime_genai.Generator`` runs it.
- ExecuTorch: the LLM export shipped in the executorch wheel (``executorch.examples.models.llama.export_llama``:
  its own transformer with the custom SDPA + KV-cache ops, lowered to XNNPACK) from a Meta-format checkpoint and
  ``params.json`` written here from the same weights; the ``.pte`` runs through ``executorch.runtime``.

Every loop here returns hfexport's ``GenerationResult`` with the timing split hfexport's own decode loop uses:
prefill is the prompt's call up to the first greedy token, decode the ``max_new_tokens - 1`` calls after it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hfexport.runtime.decode import GenerationResult

# ExecuTorch's own recipe per transformers model_type: the --model name export_llama is run with and the
# params.json entries beyond the dimensions. Llama follows executorch/examples/models/smollm2 (q/k rows permuted
# to Meta's interleaved rotary layout, as its torchtune conversion does); Qwen3 follows examples/models/qwen3
# (HF rotary layout kept, q/k norm before rotary).
EXECUTORCH_RECIPES: dict[str, dict[str, Any]] = {
    "llama": {"model": "smollm2", "params": {"use_hf_rope": False}},
    "qwen3": {"model": "qwen3_0_6b", "params": {"use_hf_rope": True, "use_qk_norm": True, "qk_norm_before_rope": True}},
}

# export_llama's --quantization_mode per precision (float32: none); the group size is passed with -G.
EXECUTORCH_QMODES = {"float32": None, "8da4w": "8da4w", "int8": "int8"}
# The model builder's (-p, MatMulNBits accuracy level) per precision: the arithmetic of hfexport's scheme of that
# name, float32 activations (level 1). The builder's CPU default is level 4, int8 activations, which no hfexport
# ONNX scheme computes. None: no quantized MatMul at that precision.
ORT_GENAI_PRECISIONS = {"float32": ("fp32", None), "int4": ("int4", 1), "int8": ("int8", 1)}
# Precisions also measured at the builder's CPU default (accuracy level 4), a row of its own: what a user of the
# builder gets, and what an int8-activation scheme of hfexport would be measured against.
ORT_GENAI_DEFAULT_LEVEL = {"int4": ("int4", 4)}


def save_checkpoint(model: Any, directory: Path) -> None:
    """``save_pretrained`` plus a word-level tokenizer over the model's vocabulary, built offline.

    The model builder loads a tokenizer from the folder (and copies it beside the ONNX model); the benchmark
    feeds token ids, so any tokenizer of the right vocabulary size serves, and none is downloaded."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    model.save_pretrained(directory)
    config = model.config
    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    special = {"bos_token": f"t{config.bos_token_id}", "eos_token": f"t{config.eos_token_id}", "unk_token": "t0"}
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special).save_pretrained(directory)


# ----------------------------------------------------------------------------------------------- ONNX Runtime GenAI


def ort_genai_command(checkpoint: Path, out_dir: Path, precision: str, default_level: bool = False) -> list[str]:
    """The model builder on the local checkpoint for the CPU execution provider, at ``ORT_GENAI_PRECISIONS``'s
    precision and accuracy level (``ORT_GENAI_DEFAULT_LEVEL``'s with ``default_level``; its defaults otherwise:
    MatMulNBits with block size 32)."""
    builder_precision, accuracy_level = (ORT_GENAI_DEFAULT_LEVEL if default_level else ORT_GENAI_PRECISIONS)[precision]
    extra = "hf_token=false" + (f" accuracy_level={accuracy_level}" if accuracy_level is not None else "")
    return [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(checkpoint),
        "-o",
        str(out_dir),
        "-p",
        builder_precision,
        "-e",
        "cpu",
        "-c",
        str(out_dir.parent / f"{out_dir.name}.cache"),
        "--extra_options",
        *extra.split(),
    ]


class OrtGenaiLoop:
    """Greedy generation with ``onnxruntime_genai.Generator`` over a static cache of ``max_length`` slots (the
    builder's CPU model shares past and present buffers, so the cache is allocated once per generator), its
    session on ``threads`` intra-op threads like every other runtime of the run."""

    def __init__(self, model_dir: Path, max_length: int, threads: int) -> None:
        import onnxruntime_genai as og

        self._og = og
        config = og.Config(str(model_dir))
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
        self.model = og.Model(config)
        self.max_length = max_length

    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int) -> GenerationResult:
        prompt = prompt_ids[0].tolist()
        params = self._og.GeneratorParams(self.model)
        # min_length keeps EOS from ending the run early, as min_new_tokens does for eager generate.
        params.set_search_options(max_length=self.max_length, min_length=len(prompt) + max_new_tokens, do_sample=False)
        generator = self._og.Generator(self.model, params)
        start = time.perf_counter()
        generator.append_tokens(prompt)  # runs the prompt; the next call only picks from its logits
        generator.generate_next_token()
        tokens = [int(generator.get_next_tokens()[0])]
        prefill_s = time.perf_counter() - start
        decode_start = time.perf_counter()
        for _ in range(max_new_tokens - 1):
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        return GenerationResult(tokens, prefill_s, time.perf_counter() - decode_start, max_new_tokens - 1)


# ------------------------------------------------------------------------------------------------------ ExecuTorch


def _meta_rotary_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """HF's q/k projection rows (rotary halves) -> Meta's (rotary pairs interleaved): the inverse of the permute
    in transformers' convert_llama_weights_to_hf, which torchtune's HF checkpointer applies for ExecuTorch."""
    head_dim = weight.shape[0] // heads
    return weight.view(heads, 2, head_dim // 2, weight.shape[1]).transpose(1, 2).reshape(weight.shape)


def executorch_checkpoint(checkpoint: Path, out_dir: Path) -> tuple[Path, Path]:
    """(Meta-format state dict, params.json) for export_llama from the ``save_pretrained`` folder."""
    from safetensors.torch import load_file

    config = json.loads((checkpoint / "config.json").read_text())
    recipe = EXECUTORCH_RECIPES[config["model_type"]]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    layer_names = {
        "self_attn.q_proj.weight": "attention.wq.weight",
        "self_attn.k_proj.weight": "attention.wk.weight",
        "self_attn.v_proj.weight": "attention.wv.weight",
        "self_attn.o_proj.weight": "attention.wo.weight",
        "self_attn.q_norm.weight": "attention.q_norm_fn.weight",
        "self_attn.k_norm.weight": "attention.k_norm_fn.weight",
        "input_layernorm.weight": "attention_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "feed_forward.w1.weight",
        "mlp.down_proj.weight": "feed_forward.w2.weight",
        "mlp.up_proj.weight": "feed_forward.w3.weight",
    }
    state: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(checkpoint / "model.safetensors").items():
        if name == "model.embed_tokens.weight":
            state["tok_embeddings.weight"] = tensor
        elif name == "model.norm.weight":
            state["norm.weight"] = tensor
        elif name == "lm_head.weight":
            state["output.weight"] = tensor
        else:
            _, _, layer, rest = name.split(".", 3)
            if not recipe["params"]["use_hf_rope"] and rest in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
                tensor = _meta_rotary_rows(tensor, heads if rest.startswith("self_attn.q") else kv_heads)
            state[f"layers.{layer}.{layer_names[rest]}"] = tensor
    state.setdefault("output.weight", state["tok_embeddings.weight"])  # tied: saved once
    params = {
        "dim": config["hidden_size"],
        "n_layers": config["num_hidden_layers"],
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "vocab_size": config["vocab_size"],
        "hidden_dim": config["intermediate_size"],
        "ffn_dim_multiplier": 1,
        "norm_eps": config["rms_norm_eps"],
        "rope_theta": config["rope_parameters"]["rope_theta"],
        "use_scaled_rope": False,
        "attention_qkv_bias": False,
        **recipe["params"],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(state, out_dir / "checkpoint.pth")
    (out_dir / "params.json").write_text(json.dumps(params, indent=2))
    return out_dir / "checkpoint.pth", out_dir / "params.json"


def executorch_command(
    checkpoint: Path, params: Path, pte: Path, precision: str, cache: int, group_size: int, model_type: str
) -> list[str]:
    """export_llama as ExecuTorch's LLM recipes run it for XNNPACK: KV cache, custom SDPA op, fp32 activations;
    prompts up to ``cache - 1`` tokens per call and a ``cache``-slot cache."""
    qmode = EXECUTORCH_QMODES[precision]
    return [
        sys.executable,
        "-m",
        "executorch.examples.models.llama.export_llama",
        "--model",
        EXECUTORCH_RECIPES[model_type]["model"],
        "-c",
        str(checkpoint),
        "-p",
        str(params),
        "-kv",
        "--use_sdpa_with_kv_cache",
        "-X",
        "-d",
        "fp32",
        "--max_seq_length",
        str(cache),
        "--max_context_length",
        str(cache),
        "--output-dir",
        str(pte.parent),
        "--output_name",
        str(pte),
        *(["-qmode", qmode, "-G", str(group_size)] if qmode else []),
    ]


class ExecutorchLlamaLoop:
    """Greedy loop over export_llama's ``forward(tokens [1, n], input_pos [1]) -> last logits [1, vocab]``.

    The KV cache is the program's mutable buffers; a new prompt starts at position 0 and the custom SDPA attends
    to slots ``[0, input_pos + n)`` only, so what an earlier run left in later slots is never read."""

    def __init__(self, pte: Path) -> None:
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: SDPA/update_cache kernels)
        from executorch.runtime import Runtime

        self.method = Runtime.get().load_program(str(pte)).load_method("forward")

    def _next(self, tokens: torch.Tensor, position: int) -> int:
        logits = self.method.execute([tokens, torch.tensor([position], dtype=torch.long)])[0]
        return int(logits.reshape(-1, logits.shape[-1])[-1].argmax())

    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int) -> GenerationResult:
        prompt_len = prompt_ids.shape[1]
        start = time.perf_counter()
        tokens = [self._next(prompt_ids, 0)]
        prefill_s = time.perf_counter() - start
        decode_start = time.perf_counter()
        for position in range(prompt_len, prompt_len + max_new_tokens - 1):
            tokens.append(self._next(torch.tensor([[tokens[-1]]], dtype=torch.long), position))
        return GenerationResult(tokens, prefill_s, time.perf_counter() - decode_start, max_new_tokens - 1)

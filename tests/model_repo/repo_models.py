"""A model repo outside the project: a causal LM, an encoder-decoder and a plain module, every default check.

Run by tests/test_model_repo_checks.py from a copy in a temporary folder, as a repo runs it: `pytest` with the
plugin, the default checks (chosen by what each model is), and a baseline gate. The name keeps pytest from collecting it here."""
import torch
import transformers
from pytest_hfexport import ModelCase, parametrize_with_checks


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config)


def tiny_t5():
    config = transformers.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return transformers.T5ForConditionalGeneration(config)


class Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(96, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, input_ids, attention_mask):
        hidden = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        return self.head(hidden.sum(1) / attention_mask.sum(1, keepdim=True))


def tokens(model, batch, seq):
    ids = torch.randint(2, 96, (batch, seq))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def seq2seq(model, batch, seq):
    return {**tokens(model, batch, seq), "decoder_input_ids": torch.zeros(batch, 1, dtype=torch.long)}


@parametrize_with_checks([
    ModelCase("tiny-llama", tiny_llama, tokens),
    ModelCase("tiny-t5", tiny_t5, seq2seq),
    ModelCase("scorer", Scorer, tokens),
])
def test_exportable(check):
    check()

"""A downstream repo's own model: a tiny config class and a PreTrainedModel subclass, nothing from the hub."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class TinyClassifierConfig(PretrainedConfig):
    model_type = "tiny-classifier-example"

    def __init__(self, vocab_size: int = 64, hidden_size: int = 16, num_labels: int = 3, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(num_labels=num_labels, **kwargs)


class TinyClassifier(PreTrainedModel):
    """Embeds tokens, mean-pools over the attention mask, classifies."""

    config_class = TinyClassifierConfig
    base_model_prefix = "tiny"

    def __init__(self, config: TinyClassifierConfig):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.head = torch.nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None):
        hidden = torch.tanh(self.mix(self.embed(input_ids)))
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return SequenceClassifierOutput(logits=self.head(pooled), hidden_states=(hidden,))


def build() -> TinyClassifier:
    return TinyClassifier(TinyClassifierConfig())


def make_inputs(model: TinyClassifier, batch: int, seq: int) -> dict:
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1 and seq > 2:
        mask[0, :2] = 0  # left padding: the mask must really be used
    return {"input_ids": ids, "attention_mask": mask}

"""A tiny BERT (transformers' own BertModel, random weights) with MiniLM's vocabulary size, so real MiniLM token ids
index its embedding: the model export-diff --text-samples feeds real sentences to."""
from __future__ import annotations

from typing import Any

VOCAB = 30522  # sentence-transformers/all-MiniLM-L6-v2's vocab.txt


def build_bert() -> Any:
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    return Wrapped().eval()


def char_ids(text: str) -> list[int]:
    """A callable tokenizer stage returning bare ids (no mask, no type ids): one id per character."""
    return [ord(c) % 97 + 1 for c in text]

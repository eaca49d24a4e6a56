"""Sequence models for the padding-invariance check (export-diff --pad-check).

Inputs ``ids:1xT:int64:1,VOCAB`` and ``mask:1xT:int64:1,2`` (1 = real token, 0 = padding);
outputs ``(hidden (B, T, D), logits (B, C))``.

- ``build_clean``: attention masks padded keys, positions count real tokens only (so left and
  right padding give the same result), masked mean pooling — padding-invariant.
- ``build_mask_ignored``: takes the mask and never uses it (a mask dropped on the way to deployment).
- ``build_mean_pool_over_padding``: masks attention but averages over every position, padding included.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, MAX_LEN, CLASSES = 100, 32, 4, 64, 3


class MaskedSelfAttention(nn.Module):
    def __init__(self, use_mask: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.use_mask = use_mask

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // HEADS)
        if self.use_mask:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, -1e9)
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Encoder(nn.Module):
    def __init__(self, use_mask: bool = True, masked_pool: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.attn = MaskedSelfAttention(use_mask)
        self.norm = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))
        self.head = nn.Linear(DIM, CLASSES)
        self.use_mask = use_mask
        self.masked_pool = masked_pool

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = mask if self.use_mask else torch.ones_like(mask)
        # Positions count real tokens only: left padding does not shift them (as HF does for generation).
        positions = (torch.cumsum(keep, dim=1) - 1).clamp(min=0)
        x = self.embed(ids) + self.pos(positions)
        x = x + self.attn(x, mask)
        hidden = self.norm(x + self.mlp(x))
        if self.masked_pool:
            weights = keep.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        else:
            pooled = hidden.mean(dim=1)
        return hidden, self.head(pooled)


def _build(**kwargs: bool) -> nn.Module:
    torch.manual_seed(0)
    return Encoder(**kwargs).eval()


def build_clean() -> nn.Module:
    return _build()


def build_mask_ignored() -> nn.Module:
    return _build(use_mask=False, masked_pool=False)


def build_mean_pool_over_padding() -> nn.Module:
    return _build(masked_pool=False)

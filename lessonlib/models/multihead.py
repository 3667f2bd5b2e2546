"""Multi-head self-attention, written out, with torch.nn.MultiheadAttention's parameters.

Self-attention is lesson 2's attention with one change: the queries, keys and values are all
linear projections of the same sequence x (B, L, d),

    q, k, v = x W_q^T + b_q, x W_k^T + b_k, x W_v^T + b_v        each (B, L, d)

Multi-head attention splits the d features of q, k and v into `heads` groups of d / heads and
runs dot_product_attention on each group independently, so each head computes its own (L, L)
weights: one head can look at the previous token while another looks at the first. The heads'
results are concatenated back to d features and mixed by the output projection:

    split (B, L, d) -> (B, heads, L, d/heads) -> attention per head -> merge -> (B, L, d) -> W_o

The weights are stored as torch stores them (in_proj_weight (3d, d) stacking W_q, W_k, W_v;
in_proj_bias (3d,); out_proj, an nn.Linear(d, d)), so state dicts move freely between this
module and nn.MultiheadAttention(d, heads, batch_first=True). Splitting into heads adds no
parameters: 4 d^2 + 4 d whatever `heads` is.

Masks: `causal` hides later positions; `key_padding_mask` (B, L_k), True for a padded key, is
torch's convention for this argument. Both become one boolean mask, True: may attend, which is
dot_product_attention's convention. A KVCache keeps the keys and values of earlier positions
for generation, so that a new token computes only its own projections.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.attention import dot_product_attention
from lessonlib.models.scan import check_last


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, L, d) -> (B, heads, L, d / heads): head h gets features h * d/heads to (h + 1) * d/heads - 1."""
    B, L, d = x.shape
    if d % heads:
        raise ValueError(f"d = {d} does not split into {heads} heads")
    return x.view(B, L, heads, d // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, heads, L, d_head) -> (B, L, heads * d_head), the inverse of split_heads."""
    B, heads, L, d_head = x.shape
    return x.transpose(1, 2).reshape(B, L, heads * d_head)


def causal_mask(L_q: int, L_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """(L_q, L_k) boolean, True where a query may see a key: itself and earlier positions.

    The L_q queries are the last L_q of the L_k positions (L_k = L_q without a cache), so query
    i sits at position L_k - L_q + i and sees keys j <= L_k - L_q + i.
    """
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)


@dataclass
class KVCache:
    """The keys and values of every position seen so far, each (B, heads, n, d_head)."""

    keys: Tensor | None = None
    values: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new positions' k and v (B, heads, L, d_head); return all keys and values."""
        if self.keys is not None:
            k, v = torch.cat([self.keys, k], dim=-2), torch.cat([self.values, v], dim=-2)
        self.keys, self.values = k, v
        return k, v


class MultiHeadAttention(nn.Module):
    """Self-attention with `heads` heads: x (B, L, d) -> (out (B, L, d), weights (B, heads, L, L_k) or None)."""

    def __init__(self, d_model: int, heads: int, bias: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model = {d_model} does not split into {heads} heads")
        self.d_model, self.heads = d_model, heads
        factory = {"device": device, "dtype": dtype}
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model, **factory))  # W_q; W_k; W_v
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model, **factory)) if bias else None
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's rule: Xavier-uniform over the stacked (3d, d) matrix, zero biases
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, *, causal: bool = False, key_padding_mask: Tensor | None = None,
                cache: KVCache | None = None, need_weights: bool = True,
                last: int | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, L, d). key_padding_mask (B, L_k), True: a padded key nobody may see.
        With a cache, x holds only the new positions; keys and values of earlier ones come from it.
        With `last`, only the last `last` positions ask (every position is still a key and a
        value), and only their outputs are returned: all a classifier of the last position needs.
        Returns the output (B, L, d) and every head's weights (B, heads, L, L_k), or None when
        need_weights is False: then, as in nn.MultiheadAttention, torch's fused kernel computes
        the same output without storing the (L, L_k) weights (on the course's CPU, attention's
        forward and backward at L = 300 ran about 5x faster)."""
        check_last(last)  # q[..., -0:] would be every position
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)  # each (B, L, d)
        q, k, v = (split_heads(t, self.heads) for t in (q, k, v))  # each (B, heads, L, d_head)
        if last is not None:
            q = q[:, :, -last:]  # (B, heads, last, d_head): these queries are the last of the keys' positions
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, heads, L_k, d_head), L_k = earlier positions + L
        L, L_k = q.shape[-2], k.shape[-2]
        mask = None  # (B or 1, 1, L or 1, L_k), True: may attend
        if causal and L > 1:  # a lone query is the last position, which sees every key
            mask = causal_mask(L, L_k, device=x.device)
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, L_k): padded keys hidden from every query
            mask = keep if mask is None else mask & keep
        if need_weights:
            context, weights = dot_product_attention(q, k, v, mask=mask)  # (B, heads, L, d_head), (B, heads, L, L_k)
        else:  # told is_causal rather than given a mask, the fused kernel never forms an (L, L) tensor
            square = causal and key_padding_mask is None and L == L_k
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=None if square else mask, is_causal=square)
            weights = None
        return self.out_proj(merge_heads(context)), weights

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, d_head={self.d_model // self.heads}"

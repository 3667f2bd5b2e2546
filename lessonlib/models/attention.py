"""(Scaled) dot-product attention, written out: scores, mask, softmax, weighted sum."""
from __future__ import annotations

import math

import torch
from torch import Tensor


def dot_product_attention(
    query: Tensor, keys: Tensor, values: Tensor, *, scale: bool = True, causal: bool = False,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """query (..., Lq, D), keys (..., Lk, D), values (..., Lk, Dv) -> context (..., Lq, Dv) and
    weights (..., Lq, Lk), whose rows sum to 1. Leading dims (batch, heads) broadcast.

    mask, boolean and broadcastable to (..., Lq, Lk), says which keys each query may see (True:
    attend), as in torch's SDPA; a padding mask of shape (B, 1, Lk) hides padded keys. A masked
    key gets a weight of exactly 0. Every query must see at least one key.

    causal lets query i see keys j <= i only, so it needs Lq == Lk: torch's SDPA aligns the mask
    top-left when Lq != Lk, a KV cache wants it bottom-right, and we pick neither silently.
    """
    if min(query.dim(), keys.dim(), values.dim()) < 2:
        raise ValueError("query, keys and values need at least 2 dims: (..., L, D)")
    if query.shape[-1] != keys.shape[-1]:
        raise ValueError(f"query and keys must share D, got {query.shape[-1]} and {keys.shape[-1]}")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"keys and values must share Lk, got {keys.shape[-2]} and {values.shape[-2]}")
    try:
        torch.broadcast_shapes(query.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError as e:
        raise ValueError(f"leading dims do not broadcast: {query.shape}, {keys.shape}, {values.shape}") from e
    Lq, Lk = query.shape[-2], keys.shape[-2]
    if causal and Lq != Lk:
        raise ValueError(f"causal attention needs Lq == Lk, got Lq={Lq}, Lk={Lk}")

    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean (True: attend), got {mask.dtype}")

    scores = query @ keys.transpose(-2, -1)  # (..., Lq, Lk): how well each query matches each key
    if scale:  # keeps the scores' variance near 1 whatever D is, so softmax does not saturate
        scores = scores / math.sqrt(query.shape[-1])
    if causal:  # -inf above the diagonal becomes exactly 0 after the softmax
        future = torch.ones(Lq, Lk, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (..., Lq, Lk)
    return weights @ values, weights  # (..., Lq, Dv)

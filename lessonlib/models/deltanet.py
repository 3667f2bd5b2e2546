"""A DeltaNet layer (Yang et al., arXiv:2406.06484), optionally gated (Gated DeltaNet, arXiv:2412.06464):
the delta rule of lessonlib.models.delta_rule, with heads, behind projections and a short convolution.

    q, k, v   = silu(conv(Linear(x)))  each          (B, T, D), conv: causal, depthwise, width 4
    q, k      = q / ||q||, k / ||k||    per head      (B, H, T, d), d = D / H
    beta      = sigmoid(Linear(x))                    (B, H, T): how much of each write goes in
    alpha     = sigmoid(Linear(x))     (gated only)   (B, H, T): how much of the state is kept
    o         = delta rule (q, k, v, beta, alpha)     (B, H, T, d), a state (d, d) per head
    y         = Linear(o, heads joined)               (B, T, D)

Why the short convolution (both papers use one): q_t, k_t and v_t then see tokens t-3..t, so the
write at a value token can take its key from the key token just before it; a projection of one
token cannot bind two neighbouring tokens, which is what a key-value pair in a recall task is.
Why unit keys: see delta_rule's docstring (a write is then a contraction). Unit queries make a read
no larger than the state.

Left out of the papers' layers: the output normalisation and output gate, and the fused kernels.
forward computes every position from a zero state and returns the final one; it does not carry
the convolution's last inputs, so it cannot continue from a state of an earlier call.
"""
from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.delta_rule import delta_rule_chunkwise, delta_rule_loop


class ShortConvolution(nn.Conv1d):
    """x (B, T, D) -> (B, T, D): a causal depthwise convolution, out_t from x_{t-w+1..t} only."""

    def __init__(self, channels: int, width: int = 4) -> None:
        super().__init__(channels, channels, width, groups=channels, padding=width - 1)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        return super().forward(x.transpose(1, 2))[..., :T].transpose(1, 2)  # pads both sides: keep the causal part


class DeltaNet(nn.Module):
    """x (B, T, D) -> y (B, T, D) and the final state S_T (B, H, d, d), d = D / H."""

    def __init__(
        self, d_model: int, n_heads: int, gated: bool = False, conv_size: int = 4,
        chunk_size: int = 32, decay_bias: float = 3.0,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.gated, self.chunk_size = gated, chunk_size
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.q_conv = ShortConvolution(d_model, conv_size)
        self.k_conv = ShortConvolution(d_model, conv_size)
        self.v_conv = ShortConvolution(d_model, conv_size)
        self.b_proj = nn.Linear(d_model, n_heads)  # beta's pre-activation, one per head
        if gated:
            self.a_proj = nn.Linear(d_model, n_heads)  # alpha's pre-activation
            nn.init.constant_(self.a_proj.bias, decay_bias)  # alpha starts near sigmoid(3) = 0.95: keep
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, d)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def inputs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """x (B, T, D) -> q, k, v (B, H, T, d), beta and alpha (B, H, T) (alpha None if not gated)."""
        q, k, v = (self.heads(F.silu(conv(proj(x)))) for proj, conv in (
            (self.q_proj, self.q_conv), (self.k_proj, self.k_conv), (self.v_proj, self.v_conv)))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # unit queries and keys
        beta = self.b_proj(x).sigmoid().transpose(1, 2)  # (B, H, T), in (0, 1)
        alpha = self.a_proj(x).sigmoid().transpose(1, 2) if self.gated else None
        return q, k, v, beta, alpha

    def forward(self, x: Tensor, loop: bool = False) -> tuple[Tensor, Tensor]:
        """x (B, T, D) -> y (B, T, D), S_T (B, H, d, d). The chunkwise form by default (training);
        loop=True runs the token-by-token recurrence instead (the same numbers up to rounding)."""
        q, k, v, beta, alpha = self.inputs(x)
        if loop:
            o, S = delta_rule_loop(q, k, v, beta, alpha)
        else:
            o, S = delta_rule_chunkwise(q, k, v, beta, alpha, chunk_size=self.chunk_size)
        B, H, T, d = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * d)), S  # heads joined, (B, T, D)


"""M independent RNN or GRU classifiers trained as one: every weight gets a leading model dimension.

Each member is embedding -> one recurrent layer (vanilla tanh RNN or GRU) -> linear head on the
final hidden state, with torch's parameters (both biases and all), so M copies of an nn.RNN- or
nn.GRU-based classifier load in exactly and train under the same optimizer as they would apart.
One batched matmul per time step then serves all M models.

Why it exists: on a CPU, torch's nn.RNN and nn.GRU run each time step as a handful of small ops
whose fixed cost dominates at hidden size 32. This loop has fewer ops per step (the input
projection is done for all steps at once) and shares them among the M models. Training the 3
seeds of the memory task together took 2.1-2.2x less CPU time than 3 nn.RNN runs (1 thread,
batch 64, lengths 30 and 100); the same loop for one model alone is 1.2-1.4x faster than nn.RNN.
The GRU gains less: the memory task's GRU sweep (3 seeds at lengths 10 and 30, 3 open-gate seeds
at 100) took 1.3x less CPU time than with nn.GRU (24.5 s -> 18.5 s, one process).
The LSTM goes the other way: nn.LSTM runs on a fused oneDNN kernel that a batched loop of small
ops did not beat (2.5x slower for 3 models), so LSTMs are trained one by one.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class BatchedRNNClassifier(nn.Module):
    """tokens (M, B, L) -> logits (M, B, C): model m reads tokens[m] with its own weights.

    Built from M models that each have .embed (nn.Embedding), .rnn (nn.RNN with tanh, or nn.GRU;
    one layer, batch_first) and .head (nn.Linear); their weights are copied in.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        kinds = {type(m.rnn) for m in models}
        if kinds not in ({nn.RNN}, {nn.GRU}):
            raise TypeError(f"expected models that all have an nn.RNN or all an nn.GRU, got {kinds}")
        self.gru = kinds == {nn.GRU}

        def stack(weight_of) -> nn.Parameter:  # (M, ...) from one tensor per model
            return nn.Parameter(torch.stack([weight_of(m).detach().clone() for m in models]))

        # G = 1 for the RNN; 3 for the GRU, its gates stacked r, z, n as in nn.GRU
        self.embed = stack(lambda m: m.embed.weight)  # (M, V, E)
        self.weight_ih = stack(lambda m: m.rnn.weight_ih_l0.T)  # (M, E, G*H): x @ W, no transpose per step
        self.weight_hh = stack(lambda m: m.rnn.weight_hh_l0.T)  # (M, H, G*H)
        self.bias_ih = stack(lambda m: m.rnn.bias_ih_l0)  # (M, G*H)
        self.bias_hh = stack(lambda m: m.rnn.bias_hh_l0)  # (M, G*H)
        self.head_weight = stack(lambda m: m.head.weight.T)  # (M, H, C)
        self.head_bias = stack(lambda m: m.head.bias)  # (M, C)

    def forward(self, tokens: Tensor) -> Tensor:
        M, B, L = tokens.shape
        V, H = self.embed.shape[1], self.weight_hh.shape[1]
        # each model looks up its own table: shift model m's tokens into rows m*V .. m*V+V-1
        offsets = torch.arange(M, device=tokens.device).view(M, 1, 1) * V
        x = F.embedding(tokens + offsets, self.embed.flatten(0, 1))  # (M, B, L, E)
        # the input projection for every step at once; the RNN folds both biases in, the GRU
        # keeps b_hh for each step because its reset gate multiplies W_hn h + b_hn, bias included
        bias = self.bias_ih if self.gru else self.bias_ih + self.bias_hh  # (M, G*H)
        xw = torch.baddbmm(bias.unsqueeze(1), x.flatten(1, 2), self.weight_ih).view(M, B, L, -1)
        h = x.new_zeros(M, B, H)
        for xw_t in xw.unbind(2):  # unbound once: indexing xw[:, :, t] every step is much slower
            if self.gru:
                hw = torch.baddbmm(self.bias_hh.unsqueeze(1), h, self.weight_hh)  # (M, B, 3H)
                r, z = torch.sigmoid(xw_t[..., :2 * H] + hw[..., :2 * H]).chunk(2, dim=-1)  # (M, B, H) each
                n = torch.tanh(xw_t[..., 2 * H:] + r * hw[..., 2 * H:])  # (M, B, H)
                h = n + z * (h - n)  # (1 - z) * n + z * h, one op fewer
            else:
                h = torch.tanh(torch.baddbmm(xw_t, h, self.weight_hh))  # (M, B, H)
        return torch.baddbmm(self.head_bias.unsqueeze(1), h, self.head_weight)  # (M, B, C)

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """nn.utils.clip_grad_norm_ for each model on its own: (M,) norms before clipping."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()  # (M,)
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # torch's rule, per model
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        return norms

"""minGRU, from "Were RNNs All We Needed?" (Feng et al., 2024), written as a choice of a_t and b_t.

    z_t  = sigmoid(Linear_z(x_t))                   update gate: reads x_t only, never h_{t-1}
    h~_t = Linear_h(x_t)                            candidate: no tanh, no reset gate
    h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

so h_t = a_t * h_{t-1} + b_t with a_t = 1 - z_t and b_t = z_t * h~_t. Since neither depends on h,
the whole sequence is one parallel scan (lessonlib.models.scan) in training, and generation is
the last line above, one step at a time. A GRU's gates read h_{t-1}, which is what forbids this.

log_space=True is the paper's log-space variant (in its appendix, for numerical stability): the
candidate goes through g(x) = x + 0.5 for x >= 0, sigmoid(x) for x < 0, which is positive, so
that b_t > 0 and the scan can run on logarithms (scan_log):

    log a_t = log(1 - z_t) = -softplus(k_t),  log z_t = -softplus(-k_t)   (k_t: z's pre-activation)
    log b_t = log z_t + log g(h~_t)

The paper's code also passes a given initial state through g; here forward takes the state itself
(so that one call can continue where another ended), and in log space it must be positive, as every
state reached from zeros is (b_t > 0). Without log_space the candidate is the plain Linear_h(x_t)
and the scan is scan_parallel: two different models (g changes the candidate), each with its own
recurrent step.

decay_bias sets Linear_z's bias: -3 starts z near 0.05, so 1 - z_t is near 0.95 and a fresh
model keeps its state (the forget-gate finding of the LSTM lesson, in minGRU's terms).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.scan import check_last, scan_log, scan_parallel


def g(x: Tensor) -> Tensor:
    """The paper's g: x + 0.5 for x >= 0, sigmoid(x) below; continuous, increasing, positive."""
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def log_g(x: Tensor) -> Tensor:
    """log g(x), computed without forming g(x) first for x < 0: log sigmoid(x) = -softplus(-x)."""
    return torch.where(x >= 0, torch.log(F.relu(x) + 0.5), -F.softplus(-x))


class MinGRU(nn.Module):
    """x (B, T, I) -> out (B, T, H), the state at every step, and the final state (B, H)."""

    def __init__(self, input_size: int, hidden_size: int, log_space: bool = False,
                 decay_bias: float | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.log_space = input_size, hidden_size, log_space
        self.linear_z = nn.Linear(input_size, hidden_size)  # gate pre-activation k_t
        self.linear_h = nn.Linear(input_size, hidden_size)  # candidate h~_t
        if decay_bias is not None:
            nn.init.constant_(self.linear_z.bias, decay_bias)

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (..., I) -> the update gate z and the candidate h~ (..., H); g(h~) in log space."""
        z = torch.sigmoid(self.linear_z(x))
        h_tilde = self.linear_h(x)
        return z, g(h_tilde) if self.log_space else h_tilde

    def coefficients(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, I) -> a, b (B, T, H): the recurrence's h_t = a_t * h_{t-1} + b_t."""
        z, h_tilde = self.gates(x)  # (B, T, H) each
        return 1 - z, z * h_tilde

    def forward(self, x: Tensor, h0: Tensor | None = None, last: int | None = None) -> tuple[Tensor, Tensor]:
        """The parallel (training) form: x (B, T, I), h0 (B, H) or None -> out (B, T, H), h_T (B, H).
        With `last`, only the last `last` positions come out (B, last, H); in log space they cost
        no cumulative scan (scan_log)."""
        check_last(last)
        if self.log_space:
            k = self.linear_z(x)  # (B, T, H)
            log_a = -F.softplus(k)  # log(1 - z)
            log_b = -F.softplus(-k) + log_g(self.linear_h(x))  # log z + log g(h~)
            log_h0 = None if h0 is None else h0.log()  # (B, H), h0 > 0
            h = scan_log(log_a, log_b, log_h0, last).exp()  # (B, T or last, H)
        else:
            a, b = self.coefficients(x)
            h = scan_parallel(a, b, h0)  # (B, T, H)
            h = h if last is None else h[:, -last:]
        return h, h[:, -1]

    def step(self, x_t: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The recurrent (generation) form: x_t (B, I), h (B, H) or None (zeros) -> out_t and the new
        state, both (B, H)."""
        if h is None:
            h = x_t.new_zeros(x_t.shape[0], self.hidden_size)
        z, h_tilde = self.gates(x_t)  # (B, H) each
        h = (1 - z) * h + z * h_tilde
        return h, h

"""A small seq2seq encoder-decoder, with and without attention, on digit-string reversal.

The task: read a string of digits, write it reversed ("30417" -> "71403"), a clean
way to show the encoder bottleneck. Without attention the decoder sees the source
only through the encoder's final state: one H-sized vector must carry every digit, and the
longer the string the more it forgets. With attention the decoder looks back at every
encoder state at every step, and the heatmap (output step x source position) is an
anti-diagonal. Read it closely: at step t a trained model may look at the digit it is writing
(source position T-1-t) or at the one it has just written (its input, position T-t): a forward
RNN's state at position i also remembers digit i-1, which is the next digit to write, and the
digit just written is the decoder's own input. Which of the two a model settles on is decided
in training; the lesson counts the shares of its own model (length 12), and measures how far
its weights follow the digit read when that digit is swapped.

By default every batch holds strings of one length (bucketing), so a batch has no padding at
all: the encoder's final state is the true final state and attention needs no mask. Training
draws a fresh length for every step. With ``padded=True`` a batch mixes lengths instead, and
shorter strings are filled up with PAD at the end. Two things then keep PAD out of the answer:
the encoder packs the batch (``pack_padded_sequence``), so each string's final state is taken
after its last real token, not after the PADs; and the decoder's attention gets a mask, so a
padded position gets exactly zero weight. ``Seq2Seq(mask=False)`` leaves the mask out (the
common bug, kept for the lesson's experiment). Padding is read off the data: PAD never occurs in
a string, only after it.

Attention is Luong's "dot" score without input feeding: the decoder RNN runs exactly as it
would without attention, and its hidden state h_t then queries the encoder outputs,

    score[t, i] = h_t . enc_i      weights = softmax(score)     context_t = weights @ enc
    logits_t = W_out tanh(W_c [h_t; context_t])

so teacher forcing needs no Python loop over time, and the only difference between the two
models is whether context_t is there.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from joblib import Parallel, delayed
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lessonlib.device import cpus, steady_cpu
from lessonlib.models.attention import dot_product_attention
from lessonlib.progress import progress as progress_bar

# ----------------------------------------------------------------------------- the task

PAD, BOS, EOS = 0, 1, 2
DIGIT0 = 3                 # token of the digit "0"; "9" is DIGIT0 + 9
VOCAB_SIZE = DIGIT0 + 10   # 13
SYMBOLS = ["<pad>", "<s>", "</s>"] + [str(d) for d in range(10)]


def make_batch(length: int, batch_size: int, generator: torch.Generator,
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random digit strings of one length and their reversals.

    Returns src (B, length) of digit tokens and tgt (B, length + 1): src reversed, then EOS.
    Drawn on the CPU with ``generator`` and then moved, so the data are the same on any device.
    """
    src = torch.randint(DIGIT0, DIGIT0 + 10, (batch_size, length), generator=generator)  # (B, T)
    eos = torch.full((batch_size, 1), EOS, dtype=torch.long)
    tgt = torch.cat([src.flip(1), eos], dim=1)                                          # (B, T+1)
    return src.to(device), tgt.to(device)


def make_padded_batch(batch_size: int, min_len: int, max_len: int, generator: torch.Generator,
                      device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` strings of lengths drawn uniformly from [min_len, max_len], padded with PAD.

    Returns src (B, T) and tgt (B, T + 1), T the longest length drawn: each row as
    ``make_batch`` would give it for its own length, then PAD up to the common width.
    """
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)   # (B,)
    T = int(lengths.max())
    digits = torch.randint(DIGIT0, DIGIT0 + 10, (batch_size, T), generator=generator)   # (B, T)
    positions = torch.arange(T)
    real = positions < lengths[:, None]                                                # (B, T)
    src = digits.masked_fill(~real, PAD)
    # target position j holds source position L-1-j (for j < L): each row reversed within its length
    mirror = (lengths[:, None] - 1 - positions).clamp(min=0)                           # (B, T)
    reversed_ = src.gather(1, mirror).masked_fill(~real, PAD)
    tgt = torch.cat([reversed_, torch.full((batch_size, 1), PAD)], dim=1)              # (B, T+1)
    tgt = tgt.scatter(1, lengths[:, None], EOS)                                        # EOS right after the digits
    return src.to(device), tgt.to(device)


def to_text(tokens: torch.Tensor | list[int], *, stop_at_eos: bool = True) -> list[str]:
    """Token ids to symbols, e.g. for heatmap axis labels; stops after the first EOS."""
    out = []
    for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens):
        if t == PAD:
            continue
        out.append(SYMBOLS[t])
        if stop_at_eos and t == EOS:
            break
    return out


def decode(tokens: torch.Tensor | list[int]) -> str:
    """Token ids to the digit string they spell, up to the first EOS ("</s>" and "<pad>" dropped)."""
    return "".join(s for s in to_text(tokens) if s.isdigit())


# ----------------------------------------------------------------------------- the model

RNNS = {"gru": nn.GRU, "lstm": nn.LSTM}
State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # GRU: h (1, B, H); LSTM: (h, c)


class Encoder(nn.Module):
    def __init__(self, hidden: int, embed: int = 32, cell: str = "gru"):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, embed)
        self.rnn = RNNS[cell](embed, hidden, batch_first=True)

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, State]:
        # src (B, T) -> outputs (B, T, H): the hidden state after every source token,
        # and the final state (what a decoder without attention gets, and all it gets)
        embedded = self.embed(src)                                     # (B, T, E)
        lengths = (src != PAD).sum(dim=1)                              # (B,)
        if bool((lengths == src.shape[1]).all()):                      # no padding: one plain pass
            return self.rnn(embedded)
        # Packed, the RNN stops each row at its own length: its final state is taken after the
        # last real token, not after the PADs, and PAD positions get outputs of exactly 0.
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, state = self.rnn(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])
        return outputs, state


Attend = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def luong_attention(decoder_states: torch.Tensor, encoder_outputs: torch.Tensor,
                    mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Luong dot score, unscaled: exactly `softmax(h @ enc^T)`, the lesson's snippet.

    decoder_states (B, T_out, H), encoder_outputs (B, T_in, H) -> context (B, T_out, H), weights (B, T_out, T_in)
    mask (B, T_in), True at real source tokens: padded positions get a weight of exactly 0.
    """
    return dot_product_attention(decoder_states, encoder_outputs, encoder_outputs, scale=False,
                                 mask=None if mask is None else mask[:, None, :])  # (B, 1, T_in): every step alike


class Decoder(nn.Module):
    def __init__(self, hidden: int, embed: int = 32, cell: str = "gru", attention: bool = True,
                 attend: Attend = luong_attention):
        super().__init__()
        self.attention = attention
        self.attend = attend  # any function of the same shape: the exercise plugs in the reader's
        self.embed = nn.Embedding(VOCAB_SIZE, embed)
        self.rnn = RNNS[cell](embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, VOCAB_SIZE)
        # Drawn last: its shape is the one difference between the models with and without
        # attention, so every layer before it starts from the same numbers for the same seed.
        self.combine = nn.Linear(2 * hidden if attention else hidden, hidden)  # [h; context] -> H

    def forward(self, tokens: torch.Tensor, state: State, encoder_outputs: torch.Tensor,
                src_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        """Run the decoder over ``tokens`` (B, T_out) given as inputs (teacher forcing).

        Returns logits (B, T_out, V), the new state, and attention weights (B, T_out, T_in),
        or None without attention (then ``encoder_outputs`` is never read). ``src_mask``
        (B, T_in), True at real source tokens, hides padded positions from attention.
        """
        hidden, state = self.rnn(self.embed(tokens), state)  # (B, T_out, H)
        if not self.attention:
            return self.out(torch.tanh(self.combine(hidden))), state, None
        if src_mask is None:  # a function written for unpadded batches needs no mask argument
            context, weights = self.attend(hidden, encoder_outputs)
        else:
            context, weights = self.attend(hidden, encoder_outputs, src_mask)
        # context (B, T_out, H), weights (B, T_out, T_in)
        features = torch.tanh(self.combine(torch.cat([hidden, context], dim=-1)))
        return self.out(features), state, weights

    def step(self, token: torch.Tensor, state: State, encoder_outputs: torch.Tensor,
             src_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        """One decoding step: token (B,) -> logits (B, V), state, weights (B, T_in) or None."""
        logits, state, weights = self(token[:, None], state, encoder_outputs, src_mask)
        return logits[:, 0], state, (None if weights is None else weights[:, 0])


class Seq2Seq(nn.Module):
    def __init__(self, attention: bool, hidden: int = 64, embed: int = 32, cell: str = "gru",
                 attend: Attend = luong_attention, mask: bool = True):
        super().__init__()
        self.attention = attention
        self.mask = mask  # hide padded source positions from attention (False: the bug, on purpose)
        self.encoder = Encoder(hidden, embed, cell)
        self.decoder = Decoder(hidden, embed, cell, attention, attend)

    def source_mask(self, src: torch.Tensor) -> torch.Tensor | None:
        """(B, T_in), True at real source tokens; None when nothing is padded or mask=False."""
        real = src != PAD
        return None if not self.mask or bool(real.all()) else real

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src (B, T_in), tgt (B, T_out) -> logits (B, T_out, V).

        The decoder reads <s> followed by the target shifted right, and predicts the target.
        """
        encoder_outputs, state = self.encoder(src)
        bos = torch.full_like(tgt[:, :1], BOS)
        logits, _, _ = self.decoder(torch.cat([bos, tgt[:, :-1]], dim=1), state, encoder_outputs,
                                    self.source_mask(src))
        return logits

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed back the most likely token, ``max_len`` steps.

        Returns tokens (B, max_len), PAD after the first EOS, and the attention weights
        (B, max_len, T_in), or None for the model without attention. Row t of the weights
        belongs to the step that reads <s> (t = 0) or tokens[:, t-1] and writes tokens[:, t].
        """
        encoder_outputs, state = self.encoder(src)
        src_mask = self.source_mask(src)
        token = torch.full_like(src[:, 0], BOS)                # (B,)
        done = torch.zeros_like(token, dtype=torch.bool)       # has this row written EOS yet?
        tokens, weights = [], []
        for _ in range(max_len):
            logits, state, w = self.decoder.step(token, state, encoder_outputs, src_mask)
            token = logits.argmax(-1)                          # (B,)
            tokens.append(token.masked_fill(done, PAD))
            weights.append(w)
            done = done | (token == EOS)
        attn = torch.stack(weights, dim=1) if self.attention else None
        return torch.stack(tokens, dim=1), attn


# ----------------------------------------------------------------------------- training

def initial_model(attention: bool, seed: int = 0, *, hidden: int = 64, cell: str = "gru",
                  attend: Attend = luong_attention, mask: bool = True) -> Seq2Seq:
    """The untrained model ``train`` starts from: drawn on the CPU from ``seed`` (the same numbers
    on any device), leaving the caller's RNG alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Seq2Seq(attention, hidden=hidden, cell=cell, attend=attend, mask=mask)


def train(attention: bool, seed: int = 0, device: torch.device | str = "cpu", *,
          steps: int = 2000, batch_size: int = 64, lr: float = 5e-3,
          min_len: int = 3, max_len: int = 16, hidden: int = 64, cell: str = "gru",
          attend: Attend = luong_attention, padded: bool = False, mask: bool = True,
          optimizer: type[torch.optim.Optimizer] = torch.optim.Adam, clip: float = 1.0,
          progress: bool = True, losses: list[float] | None = None) -> Seq2Seq:
    """Train one model on reversal; the budget is the same whatever ``attention`` is.

    Each step draws one length uniformly from [min_len, max_len] and a batch of that length,
    or, with ``padded``, a length per string and a batch padded to the longest (``mask``:
    whether attention hides the padding). PAD positions of the target are left out of the loss.
    The same seed gives the same batches, and the same initial weights in every layer the
    models share (all but ``decoder.combine``, whose input is wider with attention), with or
    without attention or mask (bit-identical on CPU for a fixed number of threads). The
    caller's RNG is left alone. ``losses``, if given, receives the training loss of every step.
    """
    device = torch.device(device)
    model = initial_model(attention, seed, hidden=hidden, cell=cell, attend=attend, mask=mask).to(device)
    data = torch.Generator().manual_seed(seed)  # lengths and strings: the same for both models
    opt = optimizer(model.parameters(), lr=lr)
    # lr decays linearly to 0: big early steps, then small ones so that every token is right
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    bar = progress_bar(range(steps), f"seq2seq {'with' if attention else 'without'} attention",
                       enabled=progress)
    with steady_cpu(device):
        for _ in bar:
            if padded:
                src, tgt = make_padded_batch(batch_size, min_len, max_len, data, device)
            else:
                length = int(torch.randint(min_len, max_len + 1, (), generator=data))
                src, tgt = make_batch(length, batch_size, data, device)
            logits = model(src, tgt)                                   # (B, T+1, V)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)         # RNNs: guard against spikes
            opt.step()
            schedule.step()
            if losses is not None:
                losses.append(loss.item())
    return model.eval()


def train_both(first: dict, second: dict, *, workers: int | None = None, **shared) -> tuple[Seq2Seq, Seq2Seq]:
    """``train(**first, **shared)`` and ``train(**second, **shared)``, e.g. the models without and
    with attention on the same data. On a CPU the two run side by side in ``workers`` processes
    (default: one per core, at most two), each single-threaded; the results do not depend on it."""
    device = torch.device(shared.get("device", "cpu"))
    if workers is None:
        workers = 1 if device.type != "cpu" else min(2, cpus())
    runs = [{**variant, **shared, "device": str(device)} for variant in (first, second)]  # a string crosses
    weights = Parallel(n_jobs=workers)(delayed(_trained_weights)(**run) for run in runs)
    return _rebuilt(runs[0], weights[0]), _rebuilt(runs[1], weights[1])


def _trained_weights(**run) -> dict[str, torch.Tensor]:
    """``train(**run)``'s weights, on the CPU: plain data, which crosses from a worker process (or a
    Dask cluster's worker) back to the caller, where a live model may not."""
    return train(**run).cpu().state_dict()


def _rebuilt(run: dict, weights: dict[str, torch.Tensor]) -> Seq2Seq:
    """The model ``train(**run)`` returned, from its weights: ``initial_model`` takes the options
    that shape the model, from ``run``."""
    shape = inspect.signature(initial_model).parameters
    model = initial_model(**{name: value for name, value in run.items() if name in shape})
    model.load_state_dict(weights)
    return model.to(run["device"]).eval()


@torch.no_grad()
def exact_match(model: Seq2Seq, lengths: list[int] | tuple[int, ...] = (4, 8, 12, 16),
                n: int = 500, seed: int = 1234, device: torch.device | str | None = None
                ) -> dict[int, float]:
    """Fraction of ``n`` fixed random strings per length reversed exactly, EOS included.

    Greedy decoding runs two steps past the target, so a too-long answer counts as wrong.
    The strings depend on ``seed`` and the length only, so both models see the same ones.
    """
    device = next(model.parameters()).device if device is None else torch.device(device)
    accuracy = {}
    with steady_cpu(device):
        for length in lengths:
            src, tgt = make_batch(length, n, torch.Generator().manual_seed(seed + length), device)
            tokens, _ = model.greedy_decode(src, max_len=length + 3)
            target = F.pad(tgt, (0, 2), value=PAD)                      # (n, length + 3)
            accuracy[length] = (tokens == target).all(dim=1).float().mean().item()
    return accuracy

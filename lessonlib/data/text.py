"""Text for a character-level language model: the plays, a character tokenizer, and batches.

The text is six plays of Shakespeare that ship with lessonlib (lessonlib/data/shakespeare, see
its README for source and licence); nothing is downloaded. Five plays are the training text and
the sixth, Macbeth, is held out whole: the validation text is a play the model never read.

    text = corpus()                    # {"train": str, "val": str}
    tok = CharTokenizer(text["train"] + text["val"])
    ids = tok.encode("To be")          # (5,) int64, one id per character
    tok.decode(ids) == "To be"

Two ways to cut the training ids into batches:

- `streams(ids, batch)` lays the text out as `batch` rows, each a contiguous stretch of it, and
  `chunks(rows, length)` walks along them `length` characters at a time. Chunk i + 1 of a row
  continues chunk i, so a recurrent model can carry its hidden state from one chunk to the next
  (truncated backpropagation through time).
- `windows(ids, length)` cuts the text into non-overlapping windows that each stand alone: how a
  transformer with a fixed context, or any model started from an empty state, reads it;
  `random_windows` draws them at random places instead.
"""
from __future__ import annotations

from collections.abc import Iterator
from importlib import resources

import torch
from torch import Tensor

TRAIN_PLAYS = ("hamlet", "othello", "lear", "romeo_and_juliet", "julius_caesar")
VAL_PLAYS = ("macbeth",)


def play(name: str) -> str:
    """One play's text, as shipped (lessonlib/data/shakespeare/<name>.txt)."""
    return resources.files("lessonlib.data").joinpath("shakespeare", f"{name}.txt").read_text(encoding="utf-8")


def corpus() -> dict[str, str]:
    """{"train": the five training plays, one after another; "val": the held-out play}."""
    return {"train": "".join(play(p) for p in TRAIN_PLAYS), "val": "".join(play(p) for p in VAL_PLAYS)}


class CharTokenizer:
    """One id per distinct character of `text`, in sorted order: "\\n" is 0, " " is 1, ...

    encode(str) -> (N,) int64 ids; decode(ids) -> str, its inverse. A character that `text`
    did not contain has no id, and encode says which one.
    """

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))  # the vocabulary: every character that occurs
        self.ids = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        try:
            return torch.tensor([self.ids[c] for c in text], dtype=torch.long)
        except KeyError as e:
            raise ValueError(f"{e.args[0]!r} is not in the tokenizer's vocabulary") from None

    def decode(self, ids: Tensor | list[int]) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else ids
        return "".join(self.chars[i] for i in ids)


def streams(ids: Tensor, batch: int) -> Tensor:
    """(N,) -> (batch, N // batch): row b is the b-th contiguous stretch of the text (the last
    N % batch characters are dropped)."""
    per_row = len(ids) // batch
    return ids[: batch * per_row].view(batch, per_row)


def chunks(rows: Tensor, length: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Walk along (B, N) rows `length` characters at a time: (inputs, targets), each (B, length),
    the targets the inputs shifted by one. Chunk i + 1 starts where chunk i ended."""
    for start in range(0, rows.shape[1] - length, length):  # the last chunk needs one more target
        yield rows[:, start : start + length], rows[:, start + 1 : start + length + 1]


def random_windows(ids: Tensor, length: int, count: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """(inputs, targets), each (count, length): windows starting at `count` places drawn at random
    (uniformly, from a generator seeded with `seed`), and the characters that follow their inputs.
    Each position of the windows then lands on its own random sample of the text."""
    starts = torch.randint(0, len(ids) - length, (count,), generator=torch.Generator().manual_seed(seed))
    offsets = starts[:, None] + torch.arange(length)  # (count, length)
    return ids[offsets], ids[offsets + 1]


def windows(ids: Tensor, length: int, stride: int | None = None) -> tuple[Tensor, Tensor]:
    """(inputs, targets), each (W, length): windows of `length` inputs, one starting every
    `stride` characters (default: `length`, so that they do not overlap), and the `length`
    characters that follow each one's inputs."""
    stride = length if stride is None else stride
    x = ids[:-1].unfold(0, length, stride)  # (W, length), a view: window w starts at w * stride
    y = ids[1:].unfold(0, length, stride)
    return x, y

"""Which torch device the lessons and tests run on."""
from __future__ import annotations

import os

import torch


def device() -> torch.device:
    """The build's device: CPU unless LESSONLIB_DEVICE names another (e.g. ``cuda``).

    Published numbers are built on CPU so that every build prints the same digits.
    """
    name = os.environ.get("LESSONLIB_DEVICE", "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"LESSONLIB_DEVICE={name} but torch sees no CUDA device")
    return dev


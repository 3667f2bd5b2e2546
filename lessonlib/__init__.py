"""lessonlib: the course's build-time engine and its small reference models."""
from lessonlib.device import device

__all__ = ["device"]

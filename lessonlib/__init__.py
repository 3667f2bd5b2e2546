"""lessonlib: the course's build-time engine and its small reference models."""
from lessonlib.device import device
from lessonlib.engine.memo import memo
from lessonlib.progress import progress

__all__ = ["device", "memo", "progress"]

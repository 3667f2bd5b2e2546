"""lessonlib: the course's build-time engine and its small reference models.

Lesson code uses ``lessonlib.device()``, ``lessonlib.memo``, ``lessonlib.progress``,
``lessonlib.figure_data`` (a figure's numbers, offered as a table), ``lessonlib.claim`` (an
assert's message that quotes the sentence it checks), ``lessonlib.scratch()`` (the page's own
folder for files it makes) and ``lessonlib.publish`` (a file published beside the page), and ``lessonlib.exploration``
(a figure the reader drives); a downloaded notebook starts
with ``lessonlib.start_page()``, the state every page starts from. None of
them imports torch until it is used, so the build process, which only renders the pages that
come from the cache, never imports torch.
"""
from __future__ import annotations

import importlib

from lessonlib.progress import progress

__all__ = ["claim", "device", "figure_data", "memo", "memoized", "progress", "publish", "scratch", "start_page"]


def __getattr__(name: str):
    if name == "device":  # the course's torch policy (lessonlib.device() is the device): the engine never imports it
        return importlib.import_module("lessonlib.device")
    if name == "claim":
        from lessonlib.engine.worker.claims import claim

        return claim
    if name == "memo":  # the engine's memo imports joblib: only pages need it
        from lessonlib.engine.worker.memo import memo

        return memo
    if name == "memoized":  # a block's memo="..." option, as an exported notebook runs it
        from lessonlib.engine.worker.shown import memoized

        return memoized
    if name == "figure_data":  # with matplotlib: only pages that draw need it
        from lessonlib.engine.worker.svg import figure_data

        return figure_data
    if name in ("scratch", "publish"):
        from lessonlib.engine.worker import page_files

        return getattr(page_files, name)
    if name == "start_page":  # with torch
        from lessonlib.engine.worker.session import start_page

        return start_page
    raise AttributeError(f"module 'lessonlib' has no attribute {name!r}")

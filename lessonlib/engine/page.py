"""execute_page: the one executor behind the MkDocs plugin, the pytest collector and the CLI."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

import lessonlib
from lessonlib.engine.blocks import ParsedPage, parse_page
from lessonlib.engine.cache import PageCache, PageOutputs, environment_fingerprint, page_key
from lessonlib.engine.memo import memo_location
from lessonlib.engine.render import render
from lessonlib.engine.session import SEED, Session


@dataclass(frozen=True)
class Settings:
    timeout: float = 600.0  # seconds per block, unless the block says otherwise
    cache_dir: Path | None = None  # None: neither read nor write a cache
    execute: bool = True  # False: show the code, run nothing (LESSONLIB_EXECUTE=0)
    refresh: bool = False  # run even on a cache hit, memoized experiments too (LESSONLIB_REFRESH=1)

    def with_environment(self) -> Settings:
        """Apply the LESSONLIB_EXECUTE, LESSONLIB_REFRESH and LESSONLIB_CACHE_DIR switches."""
        cache_dir = os.environ.get("LESSONLIB_CACHE_DIR")
        return replace(
            self,
            cache_dir=Path(cache_dir) if cache_dir else self.cache_dir,
            execute=self.execute and os.environ.get("LESSONLIB_EXECUTE", "1") != "0",
            refresh=self.refresh or os.environ.get("LESSONLIB_REFRESH", "0") == "1",
        )


@dataclass
class PageResult:
    page: ParsedPage
    markdown: str
    outputs: PageOutputs | None = None  # None when nothing ran (no code, or execution off)
    blocks_run: int = 0
    from_cache: bool = False
    seconds: float = 0.0


def execute_page(text: str, path: str, settings: Settings) -> PageResult:
    """Run (or fetch from the cache) every block of one page and render it back to Markdown.

    Raises LessonError, located at ``path:LINE``, on any failure; nothing is cached then.
    """
    started = time.perf_counter()
    page = parse_page(text, path)
    if not page.executable or not settings.execute:
        return PageResult(page, render(page, None, None))
    environment = environment_fingerprint()
    key = page_key(page, environment)
    cache = PageCache(settings.cache_dir) if settings.cache_dir else None
    outputs = None if cache is None or settings.refresh else cache.load(key)
    result = PageResult(page, "", outputs, from_cache=outputs is not None)
    if outputs is None:
        memo_dir = None if cache is None or settings.refresh else settings.cache_dir / "memo" / environment[:16]
        with memo_location(memo_dir):
            outputs = run_page(page, settings.timeout)
        result.outputs, result.blocks_run = outputs, len(page.blocks)
        if cache:
            cache.store(key, outputs)
    result.markdown = render(page, *outputs, footer=stamp(key))
    result.seconds = time.perf_counter() - started
    return result


def run_page(page: ParsedPage, timeout: float) -> PageOutputs:
    session = Session(page, timeout)
    blocks = [session.run(block) for block in page.blocks]
    values = {inline.source: session.value(inline) for inline in page.inlines}
    return blocks, values


def stamp(key: str) -> str:
    """The build stamp under every executed page: how its numbers were produced."""
    return (
        f'<p class="lessonlib-stamp">Numbers and figures on this page were computed when the site was built: '
        f"torch {version('torch')}, device <code>{lessonlib.device()}</code>, seed {SEED}, "
        f"code hash <code>{key[:12]}</code>.</p>"
    )

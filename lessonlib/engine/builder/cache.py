"""Page cache, two-level like ccache's direct mode: never keyed on prose, never on file times.

The static key covers the page's path, its blocks and their options, its inline expressions,
and the environment (store.environment_fingerprint: the Python version, the device, the seed
and the format). The entry under it
holds the outputs and the manifest of what the run actually read (lessonlib.engine.worker.inputs),
the installed distributions its code refers to included; a lookup hits only if every recorded
input is unchanged. The engine's code is not in the key: the worker-side modules a page ran
with are inputs in its manifest, like any project module, and the build-side ones (plugin,
render, notebook, the HTML and search memos, pool, page, this module) change no stored result;
what they store themselves is keyed on their own code (store.source_fingerprint). Entries are
sealed (store.seal: one the build did not write is a miss), are written atomically and exist only
for complete, successful runs; what the build loads from the cache is JSON, never a pickle. Paths
in keys and manifests are relative to the project's root, so every clone shares one cache (by
default the user's: lessonlib.engine.config.user_cache_dir). Nothing here imports torch.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lessonlib.engine.config import module_name
from lessonlib.engine.worker.blocks import Block, Inline, ParsedPage, parse_page
from lessonlib.engine.worker.errors import SetupError
from lessonlib.engine.worker.inputs import Manifest
from lessonlib.engine.worker.outputs import BlockOutput, DataTable, Figure, PageOutputs, Reference, Source
from lessonlib.engine.worker.store import (
    discard,
    file_lock,
    kept,
    seal,
    sealed,
    source_fingerprint,
    touch,
    write_atomically,
)

if TYPE_CHECKING:
    from filelock import FileLock


def page_key(page: ParsedPage, environment: str) -> str:
    """The static key: the page's code and where it lives (its folder is its working directory)."""
    blocks = [[b.kind, b.code, sorted(b.options.items())] for b in page.blocks]
    inline = [i.source for i in page.inlines]
    return hashlib.sha256(json.dumps([page.path, blocks, inline, environment]).encode()).hexdigest()


PARSER = ("worker/blocks", "worker/options", "worker/errors")  # the engine modules a parsed page comes from


def parsed_page(text: str, path: str, store: Path | None) -> ParsedPage:
    """parse_page, kept per page path in `store` while the text and the parser are the same:
    parsing, and loading the Markdown parser for it, was a third of a warm build's own work.
    Raises the page's LessonError, which is not kept, and OSError if the store cannot be written."""
    if store is None:
        return parse_page(text, path)
    version = hashlib.sha256(json.dumps([path, text, _parser_code()]).encode()).hexdigest()
    page = None

    def parse() -> bytes:
        nonlocal page
        page = parse_page(text, path)
        return json.dumps(asdict(page)).encode()

    # JSON, not a pickle: what the build loads from the cache is data, whoever wrote the file
    body = kept(store / f"{path_name(path)}.json", version, parse)
    return page if page is not None else _page_from(json.loads(body))


def _page_from(data: dict) -> ParsedPage:
    return ParsedPage(data["path"], data["lines"], [Block(**b) for b in data["blocks"]],
                      [Inline(**i) for i in data["inlines"]], data["prose"])


@functools.cache
def _parser_code() -> str:
    return source_fingerprint(*PARSER)


@dataclass
class Entry:
    outputs: PageOutputs
    manifest: Manifest


class PageCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "pages"
        self.locks = Path(root) / "locks"
        self.durations = Path(root) / "seconds"  # per page path, whatever its key: a hint for scheduling
        self.imports = Path(root) / "preload"  # per page path too: what its process imported when it last ran

    def last_seconds(self, path: str) -> float | None:
        """How long the page at `path` took the last time it ran, if it ever did (its code may differ now)."""
        try:
            return float((self.durations / path_name(path)).read_text())
        except (OSError, ValueError):
            return None

    def note_seconds(self, path: str, seconds: float) -> None:
        write_atomically(self.durations / path_name(path), f"{seconds:.3f}")

    def note_imports(self, path: str, modules: tuple[str, ...]) -> None:
        write_atomically(self.imports / path_name(path), json.dumps(list(modules)))

    def learned_preload(self, paths: list[str]) -> list[str]:
        """The modules the processes of the pages at `paths` imported when they last ran (a
        page's own project code never: see process._installed), for the template to preload."""
        learned: dict[str, None] = {}
        for path in paths:
            try:
                modules = json.loads((self.imports / path_name(path)).read_text())
                learned.update(dict.fromkeys(module_name("preload", m) for m in modules))
            except (OSError, ValueError, TypeError, SetupError):  # never ran, or not what note_imports wrote
                continue
        return sorted(learned)

    def load(self, key: str) -> Entry | None:
        """The stored entry, or None when absent, truncated, corrupt or not sealed by a build (a
        bad entry is removed)."""
        path = self.root / f"{key}.json"
        if not path.is_file():  # absent, or a folder or a pipe in its place: a miss (reading a pipe would hang)
            discard(path)
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            payload = entry["payload"]
            if not sealed(self.root, entry["seal"], _canonical(payload)):
                raise ValueError("not sealed by a build")
            blocks = [BlockOutput(b["text"], [Figure(**f) for f in b["figures"]], [DataTable(**t) for t in b["tables"]],
                                  Source(**b["source"]) if b.get("source") else None,
                                  [Reference(**r) for r in b.get("calls", [])])
                      for b in payload["blocks"]]
            published = {name: base64.b64decode(data, validate=True)
                         for name, data in payload.get("published", {}).items()}
            touch(path)
            outputs = PageOutputs(blocks, dict(payload["inline"]), published, list(payload.get("fences", [])))
            return Entry(outputs, Manifest.from_json(payload["manifest"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return None

    def store(self, key: str, entry: Entry) -> None:
        blocks, inline = entry.outputs.blocks, entry.outputs.values
        payload = {"blocks": [asdict(b) for b in blocks], "inline": inline, "fences": entry.outputs.fences,
                   "manifest": entry.manifest.to_json()}
        if entry.outputs.published:  # absent from entries that publish nothing (and from older ones)
            payload["published"] = {name: base64.b64encode(data).decode()
                                    for name, data in sorted(entry.outputs.published.items())}
        sealed_payload = {"seal": seal(self.root, _canonical(payload)), "payload": payload}
        write_atomically(self.root / f"{key}.json", json.dumps(sealed_payload))

    def lock(self, key: str, wait: bool) -> FileLock | None:
        """The page's lock (see file_lock)."""
        return file_lock(self.locks / f"{key}.lock", wait)


def prune(root: Path, limit_mb: float, since: float) -> int:
    """Drop the least recently used page entries and memoized results (a hit marks one used)
    until the cache holds at most `limit_mb`; never one used at or after `since` (this build's
    start). Returns how many were dropped. Safe beside other builds: a dropped entry is a miss."""
    units: dict[Path, list[os.stat_result]] = {}
    for folder in ("pages", "memo", "seconds", "preload", "notebooks", "parsed"):
        for path in (root / folder).glob("*"):
            with contextlib.suppress(FileNotFoundError):  # another build's prune took it
                if path.suffix == ".tmp" and _abandoned(path, since):
                    path.unlink()
                elif path.suffix in (".json", ".pkl") and folder in ("pages", "memo"):  # not a lock
                    units.setdefault(path.with_suffix(""), []).append(path.stat())
    size = sum(s.st_size for stats in units.values() for s in stats)
    last_used = sorted((max(s.st_mtime for s in stats), unit) for unit, stats in units.items())
    dropped = 0
    for used, unit in last_used:
        if size <= limit_mb * 2**20 or used >= since:
            break
        for suffix in (".json", ".pkl"):
            unit.with_suffix(suffix).unlink(missing_ok=True)
        size -= sum(s.st_size for s in units[unit])
        dropped += 1
        lock = (root / "locks" if unit.parent.name == "pages" else unit.parent) / f"{unit.name}.lock"
        if (held := file_lock(lock, wait=False)) is not None:  # nobody is computing it
            lock.unlink(missing_ok=True)
            held.release()
    return dropped


def file_clock(root: Path) -> float:
    """Now, by the clock that stamps file times. It can lag time.time() by a few milliseconds:
    measured by it, an entry used just after a run began never looks older than the run."""
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=root) as f:
        return os.fstat(f.fileno()).st_mtime


def _abandoned(tmp: Path, since: float) -> bool:
    """A temporary file whose writer was killed: it is gone, and it wrote before this run began."""
    try:
        pid = int(tmp.name.split(".")[-3])
        os.kill(pid, 0)
    except ProcessLookupError:
        return tmp.stat().st_mtime < since
    except (IndexError, ValueError, PermissionError):
        pass
    return False


def path_name(path: str) -> str:
    """A file name for what is kept per page path (any version of the page)."""
    return hashlib.sha256(path.encode()).hexdigest()[:32]


def _canonical(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True).encode()

"""Page cache, keyed on code only (jupyter-cache style): never on prose, never on file times.

A key covers the page's blocks and their options, its inline expressions, lessonlib's own
sources, the pinned library versions, the device and the seed. Entries carry a checksum, are
written atomically, and exist only for complete, successful runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

import lessonlib
from lessonlib.engine.blocks import ParsedPage
from lessonlib.engine.session import SEED, BlockOutput, Figure

FORMAT = 1  # bump when the stored layout or the rendering contract changes
PACKAGES = ("torch", "numpy", "matplotlib", "markdown-it-py")
SOURCE_ROOT = Path(lessonlib.__file__).parent

PageOutputs = tuple[list[BlockOutput], dict[str, str]]  # per-block outputs, inline values by source


def environment_fingerprint() -> str:
    """Everything outside the page that can change its outputs."""
    h = hashlib.sha256()
    for path in sorted(SOURCE_ROOT.rglob("*.py")):
        h.update(path.relative_to(SOURCE_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    versions = {name: version(name) for name in PACKAGES}
    facts = [FORMAT, platform.python_version(), versions, str(lessonlib.device()), SEED]
    h.update(json.dumps(facts, sort_keys=True).encode())
    return h.hexdigest()


def page_key(page: ParsedPage, environment: str) -> str:
    code = {
        "blocks": [[b.kind, b.code, sorted(b.options.items())] for b in page.blocks],
        "inline": [i.source for i in page.inlines],
        "environment": environment,
    }
    return hashlib.sha256(json.dumps(code, sort_keys=True).encode()).hexdigest()


class PageCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "pages"

    def load(self, key: str) -> PageOutputs | None:
        """The stored outputs, or None when absent, truncated or corrupt (a bad entry is removed)."""
        path = self.root / f"{key}.json"
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            payload = entry["payload"]
            if entry["checksum"] != _checksum(payload):
                raise ValueError("checksum mismatch")
            blocks = [BlockOutput(b["text"], [Figure(**f) for f in b["figures"]]) for b in payload["blocks"]]
            return blocks, dict(payload["inline"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return None

    def store(self, key: str, outputs: PageOutputs) -> None:
        blocks, inline = outputs
        payload = {"blocks": [asdict(b) for b in blocks], "inline": inline}
        entry = json.dumps({"checksum": _checksum(payload), "payload": payload})
        self.root.mkdir(parents=True, exist_ok=True)
        # Write aside, then rename: readers and concurrent builds only ever see whole entries.
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(entry)
            os.replace(tmp, self.root / f"{key}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _checksum(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

"""Page cache, keyed on code only (jupyter-cache style): never on prose, never on file times.

A key covers the page's blocks and their options, its inline expressions, the sources of the
lessonlib modules the page imports (found statically, with their own lessonlib imports) and of
the engine, the pinned library versions, the device and the seed. Entries carry a checksum, are
written atomically, and exist only for complete, successful runs.
"""
from __future__ import annotations

import ast
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
    """What every page depends on: the engine, the pinned versions, the device, the seed."""
    versions = {name: version(name) for name in PACKAGES}
    facts = [FORMAT, platform.python_version(), versions, str(lessonlib.device()), SEED]
    engine = sorted((SOURCE_ROOT / "engine").glob("*.py")) + [SOURCE_ROOT / "__init__.py"]
    return _hash_sources(engine, json.dumps(facts, sort_keys=True))


def page_key(page: ParsedPage, environment: str) -> str:
    blocks = [[b.kind, b.code, sorted(b.options.items())] for b in page.blocks]
    inline = [i.source for i in page.inlines]
    code = "\n".join(b.code for b in page.blocks) + "\n" + "\n".join(i.expr for i in page.inlines)
    modules = _hash_sources(lessonlib_modules(code), "")
    return hashlib.sha256(json.dumps([blocks, inline, modules, environment]).encode()).hexdigest()


def code_fingerprint(module: str) -> str:
    """The sources of one lessonlib module and of the lessonlib modules it imports."""
    return _hash_sources(lessonlib_modules(f"import {module}"), "")


def lessonlib_modules(code: str) -> list[Path]:
    """Source files of the lessonlib modules that `code` imports, directly or through each other."""
    found: set[Path] = set()
    pending = [code]
    while pending:
        for path in _imported_files(pending.pop()):
            if path not in found:
                found.add(path)
                pending.append(path.read_text(encoding="utf-8"))
    return sorted(found)


def _imported_files(code: str) -> list[Path]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []  # the run will report it, with its line
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    files = []
    for name in names:
        parts = name.split(".")
        if parts[0] != "lessonlib":
            continue
        base = SOURCE_ROOT.joinpath(*parts[1:])
        files += [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
    return files


def _hash_sources(paths: list[Path], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for path in paths:
        h.update(path.relative_to(SOURCE_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


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

"""What a page really read, recorded while it runs, so a cached result is used only while all of
it is unchanged (ccache's direct mode, with a manifest of inputs beside the static key).

In the worker, a Recorder notes:
- files opened for reading under the project's roots (an audit hook on ``open``), and folders
  listed there (``os.listdir``, ``os.scandir``: what ``glob`` and ``Path.iterdir`` use);
- environment variables read by the page's code or the project's modules (not by libraries,
  which read them for their own purposes and are pinned by the environment fingerprint);
- at the end, every module imported from the project (whatever imported it, statically or not).
A Manifest holds each input with a content hash; ``Manifest.changed`` tells what differs now.
Nothing here imports torch: the build checks manifests without it.
"""
from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("modules", "files", "dirs", "env")


def file_hash(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def dir_hash(path: str) -> str | None:
    try:
        return hashlib.sha256("\n".join(sorted(os.listdir(path))).encode()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def env_hash(name: str) -> str | None:
    value = os.environ.get(name)  # stored as a hash: a variable may hold a secret
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


_HASH = {"modules": file_hash, "files": file_hash, "dirs": dir_hash, "env": env_hash}


@dataclass
class Manifest:
    """Each input the run read, with its hash then (None: absent)."""

    modules: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    dirs: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)

    def changed(self) -> str | None:
        """The first input that differs now, in words (None if every one is as recorded)."""
        for kind in KINDS:
            for name, recorded in getattr(self, kind).items():
                if _HASH[kind](name) != recorded:
                    what = {"modules": "module", "files": "file", "dirs": "folder", "env": "environment variable"}
                    return f"{what[kind]} {_shown(name)} changed"
        return None

    def update(self, other: Manifest) -> None:
        for kind in KINDS:
            getattr(self, kind).update(getattr(other, kind))

    def to_json(self) -> dict:
        return {kind: dict(sorted(getattr(self, kind).items())) for kind in KINDS}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(**{kind: dict(data[kind]) for kind in KINDS})


def _shown(name: str) -> str:
    try:
        return Path(name).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return name


class Recorder:
    """Records what runs inside ``with recorder.recording():`` reads; recorders nest (a memoized
    call records its own inputs while the page's recorder sees them too)."""

    def __init__(self, roots: list[Path], ignored: list[Path], code_files: set[str]) -> None:
        self.roots = [str(r.resolve()) for r in roots]
        self.ignored = [str(p.resolve()) for p in ignored] + _installed_prefixes()
        self.code_files = set(code_files)  # e.g. the page, whose code is compiled under its path
        self.modules: set[str] = set()  # module files added by hand (what a memoized hit reached)
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.env: set[str] = set()

    @contextmanager
    def recording(self) -> Iterator[Recorder]:
        _install_hooks()
        _active.append(self)
        try:
            yield self
        finally:
            _active.remove(self)

    def manifest(self, modules: list[str] | None = None) -> Manifest:
        """Hashes as of now. `modules`: module files to include (default: every project module
        imported in this process)."""
        if modules is None:
            modules = [f for f in map(_module_file, list(sys.modules.values())) if f and self.watches(f)]
        return Manifest(
            modules={f: file_hash(f) for f in sorted(self.modules.union(modules))},
            files={f: file_hash(f) for f in sorted(self.files)},
            dirs={d: dir_hash(d) for d in sorted(self.dirs)},
            env={name: env_hash(name) for name in sorted(self.env)},
        )

    def watches(self, path: str) -> bool:
        """Is this absolute path part of the project (and not a cache, a venv or bytecode)?"""
        inside = any(path == r or path.startswith(r + os.sep) for r in self.roots)
        ignored = any(path == p or path.startswith(p + os.sep) for p in self.ignored)
        return inside and not ignored and "__pycache__" not in path and not path.endswith(".pyc")

    def is_project_code(self, filename: str) -> bool:
        return filename in self.code_files or (os.path.isabs(filename) and self.watches(filename))


def note(manifest: Manifest) -> None:
    """Add inputs read elsewhere (a memoized call's, when its stored result is used) to every
    recorder now recording."""
    for recorder in _active:
        for kind in KINDS:
            getattr(recorder, kind).update(getattr(manifest, kind))


def _module_file(module: object) -> str | None:
    file = getattr(module, "__file__", None)  # a few extension modules give a bare file name: skip them
    return os.path.realpath(file) if isinstance(file, str) and os.path.isabs(file) and file.endswith(".py") else None


def _installed_prefixes() -> list[str]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return [os.path.realpath(p) for p in prefixes]


# --- hooks, installed once per process (an audit hook cannot be removed; the worker is single-use)

_active: list[Recorder] = []
_installed = False
# os.getenv, Mapping.get, ...: their frames are skipped to find who asked (frozen or not)
_FROM_MAPPINGS = {os.__file__, sys.modules["_collections_abc"].__file__, "<frozen os>", "<frozen _collections_abc>"}


def _install_hooks() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    sys.addaudithook(_audit)
    read = os._Environ.__getitem__

    def recording_getitem(self: os._Environ, key: str) -> str:
        if _active and self is os.environ:
            _note_env_read(key)
        return read(self, key)

    os._Environ.__getitem__ = recording_getitem  # type: ignore[method-assign]


def _audit(event: str, args: tuple) -> None:
    if not _active:
        return
    if event == "open":
        path, mode, flags = args
        if isinstance(path, (str, bytes)) and _is_read(mode, flags):
            _note("files", os.path.realpath(os.fsdecode(path)))
    elif event in ("os.listdir", "os.scandir"):
        path = args[0] if args and args[0] is not None else "."
        if isinstance(path, (str, bytes)):
            _note("dirs", os.path.realpath(os.fsdecode(path)))


def _is_read(mode: object, flags: object) -> bool:
    if isinstance(mode, str):  # open() and io.open_code()
        return "r" in mode
    return isinstance(flags, int) and (flags & os.O_ACCMODE) != os.O_WRONLY


def _note(kind: str, path: str) -> None:
    for recorder in _active:
        if recorder.watches(path):
            getattr(recorder, kind).add(path)


def _note_env_read(key: str) -> None:
    frame = sys._getframe(2)  # past our wrapper and the _Environ method that called it
    while frame is not None and frame.f_code.co_filename in _FROM_MAPPINGS:
        frame = frame.f_back
    if frame is None:
        return
    for recorder in _active:
        if recorder.is_project_code(frame.f_code.co_filename):
            recorder.env.add(key)

"""What a page really read, recorded while it runs, so a cached result is used only while all of
it is unchanged (ccache's direct mode, with a manifest of inputs beside the static key).

In the worker, a Recorder notes, each fingerprinted when first read (a change during the run
is then seen at its end):
- files opened for reading under the project's roots (an audit hook on ``open``; sqlite
  databases; files named on a subprocess's command line), and folders listed there by the
  page's or the project's code (not by the import system looking for modules);
- ``stat`` probes (``os.path.exists``, ``getsize``, ``Path.is_file`` ...): present or not, the
  kind, a file's size; never file times;
- environment variables read by the page's code or the project's modules (not by libraries,
  which read them for their own purposes and are pinned by the environment fingerprint);
- at the end, every module imported from the project (whatever imported it, statically or not),
  and the installed distributions (torch, NumPy ...) that the code reached refers to, with their
  versions: bumping a library re-runs what uses it, and nothing else.
A path is named as the page named it: a symlink's target is part of its fingerprint.
Editor swap and backup files, version control and cache folders are never inputs.
Manifests name paths relative to the project's root, so an entry means the same in any copy
of the checkout. ``Manifest.changed`` tells what differs now. Nothing here imports torch.

A page's Recorder also refuses writes under the project (``refuse_writes``): a page is an
independent unit, and a file one page writes and another reads would make the reader's cached
result stale (its inputs are checked before the writer runs). Seen and refused before they
happen, at the page line that made them: ``open`` and ``os.open`` for writing, appending or
updating, and renaming, replacing, removing, linking, truncating and making or removing folders
(their audit events), in the page's process and in processes it forks. A process it starts
(``subprocess``, ``os.system``) is not traced: a file named on its command line that has changed
(its size, time or inode) or appeared by the end of the block counts as its write, after the
fact. Not seen: what such a process writes under a name it was not given, writes by compiled
code that bypasses Python's ``open`` (a C library's own fopen), writes through descriptors opened
before the page ran or relative to a ``dir_fd``, and writes into an existing sqlite database.
The page's scratch folder and the cache are not under the project, as far as this is concerned.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import importlib.metadata
import os
import re
import shlex
import stat
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

KINDS = ("modules", "files", "dirs", "probes", "env", "dists")
_WORDS = {"modules": "module", "files": "file", "dirs": "the listing of folder", "probes": "the status of",
          "env": "environment variable", "dists": "installed distribution"}

# Never a project input: version control, caches, and what editors write beside a file
# (vim: .name.swp and 4913, its write test; emacs: #name# and .#name; name~ backups).
NEVER_INPUTS = {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                ".ipynb_checkpoints", ".DS_Store", "4913"}
_EDITOR_FILE = re.compile(r"\..*\.sw[a-p]|.*~|#.*#|\.#.*")


# Engine modules a page's process imports that are keyed otherwise: the config's seed is in
# every key (the environment fingerprint), and the rest of it configures the build, not a result.
_KEYED_ELSEWHERE = {str(Path(__file__).resolve().parents[1] / "config.py")}


def never_an_input(name: str) -> bool:
    """A file or folder name that is never a project input."""
    return name in NEVER_INPUTS or _EDITOR_FILE.fullmatch(name) is not None


# --- names and fingerprints --------------------------------------------------------------------

def portable(path: str, root: str) -> str:
    """Relative to the project's root when inside it (posix), else absolute."""
    if path == root or path.startswith(root + os.sep):
        return Path(os.path.relpath(path, root)).as_posix()
    return path


def absolute(name: str, root: str | Path) -> str:
    return name if os.path.isabs(name) else os.path.join(root, name)


def file_fingerprint(path: str, root: str) -> str | None:
    """The content, and where a symlink on the way points (re-pointing it is a change)."""
    try:
        digest = hashlib.sha256(Path(path).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return None
    return _with_target(digest, path, root)


def dir_fingerprint(path: str, root: str) -> str | None:
    try:
        names = sorted(name for name in os.listdir(path) if not never_an_input(name))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    return _with_target(hashlib.sha256("\n".join(names).encode()), path, root)


def probe_fingerprint(path: str, root: str) -> str | None:
    """What a stat probe can tell: present or not, file or folder, a file's size, a link's target."""
    try:
        info = os.lstat(path) if os.path.islink(path) and not os.path.exists(path) else os.stat(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    kind = "file" if stat.S_ISREG(info.st_mode) else "folder" if stat.S_ISDIR(info.st_mode) else "other"
    size = info.st_size if kind == "file" else 0
    return _with_target(hashlib.sha256(f"{kind} {size}".encode()), path, root)


def env_fingerprint(name: str, root: str) -> str | None:
    value = os.environ.get(name)  # stored as a hash: a variable may hold a secret
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


_HEADER = re.compile(r"^(Name|Version):[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def dist_fingerprint(name: str, root: str) -> str | None:
    """An installed distribution's version (None: not installed). Read from the metadata's
    header alone: parsing whole files as e-mail (Distribution.metadata) is slow."""
    try:
        found = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    header = (found.read_text("METADATA") or found.read_text("PKG-INFO") or "").split("\n\n", 1)[0]
    return dict(_HEADER.findall(header)).get("Version")


def _with_target(digest: hashlib._Hash, path: str, root: str) -> str:
    target = os.path.realpath(path)
    if target != os.path.abspath(path):
        digest.update(b"\0-> " + portable(target, root).encode())
    return digest.hexdigest()


FINGERPRINT: dict[str, Callable[[str, str], str | None]] = {
    "modules": file_fingerprint, "files": file_fingerprint, "dirs": dir_fingerprint,
    "probes": probe_fingerprint, "env": env_fingerprint, "dists": dist_fingerprint}


@dataclass
class Manifest:
    """Each input the run read, by its portable name, with its fingerprint then (None: absent)."""

    modules: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    dirs: dict[str, str | None] = field(default_factory=dict)
    probes: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    dists: dict[str, str | None] = field(default_factory=dict)  # name: version

    def changed(self, root: str | Path, now: dict[tuple[str, str], str | None] | None = None) -> str | None:
        """The first input that differs now in the checkout at `root`, in words (None if none).
        `now`: fingerprints taken a moment ago, shared by the manifests checked together (the
        pages of one build read many of the same modules)."""
        root = str(root)
        now = {} if now is None else now
        for kind in KINDS:
            for name, recorded in getattr(self, kind).items():
                where = name if kind in ("env", "dists") else absolute(name, root)
                if (kind, where) not in now:
                    now[(kind, where)] = FINGERPRINT[kind](where, root)
                if now[(kind, where)] != recorded:
                    return f"{_WORDS[kind]} {name} changed"
        return None

    def update(self, other: Manifest) -> None:
        for kind in KINDS:
            getattr(self, kind).update(getattr(other, kind))

    def paths(self, root: str | Path) -> list[str]:
        """Every file and folder named, absolute."""
        return [absolute(name, str(root)) for kind in KINDS if kind not in ("env", "dists")
                for name in getattr(self, kind)]

    def to_json(self) -> dict:
        return {kind: dict(sorted(getattr(self, kind).items())) for kind in KINDS}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(**{kind: dict(data[kind]) for kind in KINDS})


class Recorder:
    """Records what runs inside ``with recorder.recording():`` reads; recorders nest (a memoized
    call records its own inputs while the page's recorder sees them too)."""

    def __init__(self, project: Path, roots: list[Path], ignored: list[Path], code_files: set[str],
                 refuse_writes: bool = False) -> None:
        self.project = str(Path(project).resolve())
        self.roots = [str(r.resolve()) for r in roots]
        self.ignored = [str(p.resolve()) for p in ignored] + _installed_prefixes()
        self.code_files = set(code_files)  # e.g. the page, whose code is compiled under its path
        self.seen = Manifest()
        self.refuse_writes = refuse_writes
        self.written: dict[str, int] = {}  # portable name: the page line that wrote it (0: unknown)
        self.named: dict[str, tuple[tuple | None, int]] = {}  # named to a process: its state then, the line

    def refuse_write(self, path: str) -> None:
        """Raise PermissionError for a write under the project (the write does not happen), and
        keep it: the page fails for it even if its code catches the error."""
        if not (self.refuse_writes and self.watches(path)):
            return
        name = portable(path, self.project)
        self.written.setdefault(name, self._page_line())
        raise PermissionError(errno.EACCES, f"lessonlib: a page may not write {name}, a file under the project; "
                              "write into lessonlib.scratch() or publish with lessonlib.publish()", path)

    def note_named(self, path: str) -> None:
        """A file named on a process's command line, as it is before the process runs."""
        if self.refuse_writes and self.watches(path) and not os.path.isdir(path):
            self.named.setdefault(path, (_state(path), self._page_line()))

    def first_write(self) -> tuple[str, int, bool] | None:
        """(name, line, by a process) of the first write under the project seen so far."""
        for name, line in self.written.items():
            return name, line, False
        for path, (before, line) in self.named.items():
            if _state(path) != before:
                return portable(path, self.project), line, True
        return None

    def _page_line(self) -> int:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename not in self.code_files:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else 0

    @contextmanager
    def recording(self) -> Iterator[Recorder]:
        _install_hooks()
        if not _active:  # modules imported before any recording: as they are now
            for file in self._project_modules():
                _first_seen("modules", file, self.project)
        _active.append(self)
        try:
            yield self
        finally:
            _active.remove(self)

    def manifest(self, modules: list[str] | None = None, namespaces: Iterable[dict] = ()) -> Manifest:
        """What was read, as first seen. `modules`: module files to include (default: every
        project module imported in this process). The distributions are those that these
        modules and `namespaces` (the page's globals) refer to."""
        files = self._project_modules() if modules is None else modules
        seen = Manifest(**{kind: dict(getattr(self.seen, kind)) for kind in KINDS})
        for file in files:
            seen.modules[portable(file, self.project)] = _first_seen("modules", file, self.project)
        wanted = set(files)
        project = [vars(m) for m in list(sys.modules.values()) if _module_file(m) in wanted]
        libraries = {name for name in referenced_modules([*namespaces, *project])
                     if not self.watches(_module_file(sys.modules.get(name)) or "")}
        seen.dists.update(distributions(libraries))
        return Manifest.from_json(seen.to_json())

    def note(self, kind: str, path: str) -> None:
        if kind == "env" or self.watches(path):
            getattr(self.seen, kind).setdefault(portable(path, self.project) if kind != "env" else path,
                                                _first_seen(kind, path, self.project))

    def watches(self, path: str) -> bool:
        """Is this absolute path part of the project (and not a cache, a venv, bytecode or an
        editor's file)?"""
        inside = any(path == r or path.startswith(r + os.sep) for r in self.roots)
        ignored = any(path == p or path.startswith(p + os.sep) for p in self.ignored)
        return (inside and not ignored and not path.endswith(".pyc")
                and not any(never_an_input(part) for part in Path(path).parts))

    def is_project_code(self, filename: str) -> bool:
        return filename in self.code_files or (os.path.isabs(filename) and self.watches(filename))

    def _project_modules(self) -> list[str]:
        return [f for f in map(_module_file, list(sys.modules.values()))
                if f and self.watches(f) and f not in _KEYED_ELSEWHERE]


def referenced_modules(namespaces: Iterable[dict]) -> set[str]:
    """The top-level packages of the modules, functions, classes and objects these namespaces hold."""
    found = set()
    for namespace in namespaces:
        for value in list(namespace.values()):
            try:
                name = value.__name__ if isinstance(value, types.ModuleType) else \
                    getattr(value, "__module__", None) or type(value).__module__
            except Exception:  # noqa: BLE001 (a lazy proxy that fails when looked at: not a library's)
                continue
            if isinstance(name, str) and name:
                found.add(name.partition(".")[0])
    return found


def distributions(packages: Iterable[str]) -> dict[str, str | None]:
    """The installed distributions that provide these top-level packages, with their versions."""
    owners = _packages_distributions()
    names = {owner for package in packages for owner in owners.get(package, ())}
    return {name: _first_seen("dists", name, "") for name in sorted(names)}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def note(manifest: Manifest) -> None:
    """Add inputs read elsewhere (a memoized call's, when its stored result is used) to every
    recorder now recording."""
    for recorder in _active:
        recorder.seen.update(manifest)


def _module_file(module: object) -> str | None:
    file = getattr(module, "__file__", None)  # a few extension modules give a bare file name: skip them
    return os.path.abspath(file) if isinstance(file, str) and os.path.isabs(file) and file.endswith(".py") else None


def _installed_prefixes() -> list[str]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return [os.path.realpath(p) for p in prefixes]


# --- hooks, installed once per process (an audit hook cannot be removed; the worker is single-use)

_active: list[Recorder] = []
_installed = False
_seen: dict[tuple[str, str], str | None] = {}  # (kind, path): its fingerprint when first read here
_busy = threading.local()  # inside a hook: what the hook itself opens and stats is not recorded
# os.getenv, Mapping.get, ...: their frames are skipped to find who asked (frozen or not)
_FROM_MAPPINGS = {os.__file__, sys.modules["_collections_abc"].__file__, "<frozen os>", "<frozen _collections_abc>"}


def _first_seen(kind: str, path: str, root: str) -> str | None:
    key = ("files" if kind == "modules" else kind, path)  # a module is first seen when it is opened
    if key not in _seen:
        _seen[key] = FINGERPRINT[kind](path, root)
    return _seen[key]


def _install_hooks() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    sys.addaudithook(_audit)
    read = os._Environ.__getitem__

    def recording_getitem(self: os._Environ, key: str) -> str:
        if _active and self is os.environ:
            with _quietly() as quiet:
                if quiet:
                    _note_env_read(key)
        return read(self, key)

    os._Environ.__getitem__ = recording_getitem  # type: ignore[method-assign]
    os.stat = _probing(os.stat)  # exists, isfile, getsize, Path.stat ... (no audit event for these)
    os.lstat = _probing(os.lstat)


def _probing(real: Callable) -> Callable:
    def probe(path: object, *args: object, **kwargs: object) -> os.stat_result:
        try:
            return real(path, *args, **kwargs)
        finally:
            if _active and isinstance(path, (str, bytes, os.PathLike)) and "dir_fd" not in kwargs:
                with _quietly() as quiet:
                    if quiet:
                        _note("probes", path)

    return probe


@contextmanager
def _quietly() -> Iterator[bool]:
    """True unless a hook is already at work in this thread: what a hook itself opens, lists
    and stats (fingerprinting an input) is not an input."""
    if getattr(_busy, "on", False):
        yield False
        return
    _busy.on = True
    try:
        yield True
    finally:
        _busy.on = False


def _audit(event: str, args: tuple) -> None:
    # Every other event returns at once: under memo's tracer each function call reads
    # frame.f_code, and each read raises "object.__getattr__".
    record = _RECORDERS.get(event)
    if record is None or not _active:
        return
    with _quietly() as quiet:
        if quiet:
            record(args)


def _on_open(args: tuple) -> None:
    path, mode, flags = args
    if isinstance(path, (str, bytes, os.PathLike)) and _is_write(mode, flags):
        _refuse(path)
    if isinstance(path, (str, bytes, os.PathLike)) and _is_read(mode, flags):
        _note("files", path)


def _refuse(*paths: object, dir_fd: object = None) -> None:
    if dir_fd not in (None, -1):  # relative to a folder's descriptor: not resolved (not seen)
        return
    for path in paths:
        if isinstance(path, (str, bytes, os.PathLike)):
            where = os.path.abspath(os.fsdecode(path))
            for recorder in _active:
                recorder.refuse_write(where)


def _state(path: str) -> tuple | None:
    """What tells that a process wrote a file: its size, time and inode (None: absent)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino


def _on_listing(args: tuple) -> None:
    path = args[0] if args and args[0] is not None else "."
    lister = sys._getframe(2)  # past this function and _audit: the code that listed it
    if isinstance(path, (str, bytes, os.PathLike)) and not _by_the_import_system(lister):
        _note("dirs", path)


_RECORDERS: dict[str, Callable[[tuple], None]] = {
    "open": _on_open,
    "os.listdir": _on_listing,
    "os.scandir": _on_listing,
    "sqlite3.connect": lambda args: _note_database(args[0]),
    "subprocess.Popen": lambda args: _note_command(args[1], args[2]),  # (executable, args, cwd, env)
    "os.posix_spawn": lambda args: _note_command(args[1], None),  # (path, argv, env)
    "os.system": lambda args: _note_command(args[0], None),  # (command,)
    # writes: (path, ..., dir_fd) or (src, dst, ..., dir_fds); what they name under the project is refused
    "os.rename": lambda args: _refuse(args[0], args[1], dir_fd=args[2] if args[2] not in (None, -1) else args[3]),
    "os.remove": lambda args: _refuse(args[0], dir_fd=args[1]),
    "os.rmdir": lambda args: _refuse(args[0], dir_fd=args[1]),
    "os.mkdir": lambda args: _refuse(args[0], dir_fd=args[2]),
    "os.symlink": lambda args: _refuse(args[1], dir_fd=args[2]),
    "os.link": lambda args: _refuse(args[1], dir_fd=args[3]),
    "os.truncate": lambda args: _refuse(args[0]) if not isinstance(args[0], int) else None,
    "shutil.rmtree": lambda args: _refuse(args[0], dir_fd=args[1] if len(args) > 1 else None),
}


def _by_the_import_system(frame: object) -> bool:
    """A listing made to find modules or distributions, not read by the page."""
    filename = getattr(getattr(frame, "f_code", None), "co_filename", "")
    return filename.startswith("<frozen importlib") or f"{os.sep}importlib{os.sep}metadata" in filename


def _is_write(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and ((flags & os.O_ACCMODE) != os.O_RDONLY
                                       or bool(flags & (os.O_CREAT | os.O_TRUNC | os.O_APPEND)))


def _is_read(mode: object, flags: object) -> bool:
    if isinstance(mode, str):  # open() and io.open_code()
        return "r" in mode
    return isinstance(flags, int) and (flags & os.O_ACCMODE) != os.O_WRONLY


def _note_database(database: object) -> None:
    """An existing sqlite file is read (one the page creates is its output)."""
    if not isinstance(database, (str, bytes, os.PathLike)):
        return
    name = os.fsdecode(database)
    if name.startswith("file:"):
        name = unquote(urlsplit(name).path)
    if name and name != ":memory:" and os.path.isfile(name):
        _note("files", name)


def _note_command(command: object, cwd: object) -> None:
    """Files a subprocess is given by name on its command line (what it reads is not traced)."""
    words = [command] if isinstance(command, (str, bytes, os.PathLike)) else list(command or ())
    folder = os.fsdecode(cwd) if isinstance(cwd, (str, bytes, os.PathLike)) else os.getcwd()
    for word in words:
        if not isinstance(word, (str, bytes, os.PathLike)):
            continue
        text = os.fsdecode(word)
        try:
            parts = shlex.split(text)
        except ValueError:
            parts = [text]
        for part in {text, *parts, *(p.split("=", 1)[1] for p in parts if "=" in p)}:
            candidate = os.path.join(folder, part)
            if part and not part.startswith("-") and os.path.isdir(os.path.dirname(candidate)):
                for recorder in _active:  # what the process may write, as it is now
                    recorder.note_named(os.path.abspath(candidate))
            if part and os.path.isfile(candidate):
                _note("files", candidate)
            elif part and os.path.isdir(candidate):
                _note("dirs", candidate)


def _note(kind: str, path: str | bytes | os.PathLike) -> None:
    where = os.path.abspath(os.fsdecode(path))
    for recorder in _active:
        recorder.note(kind, where)


def _note_env_read(key: str) -> None:
    frame = sys._getframe(2)  # past our wrapper and the _Environ method that called it
    while frame is not None and frame.f_code.co_filename in _FROM_MAPPINGS:
        frame = frame.f_back
    if frame is None:
        return
    for recorder in _active:
        if recorder.is_project_code(frame.f_code.co_filename):
            recorder.note("env", key)

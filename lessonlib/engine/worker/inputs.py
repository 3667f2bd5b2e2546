"""What a page really read, recorded while it runs, so a cached result is used only while all of
it is unchanged (ccache's direct mode, with a manifest of inputs beside the static key).

In the worker, a Recorder notes, each fingerprinted when first read (a change during the run
is then seen at its end), absent ones too:
- files opened for reading under the project's roots (an audit hook on ``open``; sqlite
  databases), and folders listed there by the page's or the project's code (not by the import
  system looking for modules);
- ``stat`` probes (``os.path.exists``, ``getsize``, ``Path.is_file``, ``os.access`` ...): present
  or not, the kind, a file's size; never file times;
- where the page's or the project's code looked for a module (an import, ``find_spec``): a file
  or folder of its name in each project folder on the search path, found or not;
- environment variables the page's or the project's code read, by name or all of them
  (``os.environ`` and ``os.environb``: iterating, counting or copying reads every name), not
  those libraries read for their own purposes (the environment fingerprint pins those). A
  page's are fingerprinted in the build's environment: what the engine sets for the page
  (PYTHONHASHSEED) is no input;
- what the Python processes the page starts read, forked or started anew (joblib's workers,
  ``subprocess`` running this Python): each installs these hooks and logs its reads for the
  page's process (see "the processes a page starts" below). A process that cannot (a shell, a
  compiled program) makes the run ``unseen``: no result of it is used, and the build says why;
- at the end, every module imported from the project (whatever imported it, statically or not),
  and the installed distributions (torch, NumPy ...) that the code reached refers to, with their
  versions: bumping a library re-runs what uses it, and nothing else.
A path is named as the page named it: a symlink's target is part of its fingerprint. One
relative to a ``dir_fd``, a descriptor (``os.fwalk``), "//x", and a path from outside the
project that leads into it (``/proc/self/cwd/...``) are named by the project file they reach.
Editor swap and backup files, version control and cache folders are never inputs.
Manifests name paths relative to the project's root, so an entry means the same in any copy
of the checkout. ``Manifest.changed`` tells what differs now. Nothing here imports torch.
Not seen: reads by compiled code that bypasses Python (a C library's own fopen), and what a
page's joblib calls read on a Dask cluster's workers.

A page's Recorder also refuses writes into the project and into the cache (``refuse_writes``):
a page is an independent unit, and a file one page writes and another reads would make the
reader's cached result stale (its inputs are checked before the writer runs); and the cache is
the build's (a page that rewrote another's entry would change what that page shows). Seen and
refused before they happen, at the page line that made them: ``open`` and ``os.open`` for
writing, appending or updating; renaming, replacing, removing, truncating, making or removing
folders, FIFOs, device nodes and unix sockets; changing a file's mode, owner, times or extended
attributes; and making a link, hard or symbolic, to a file there (an alias that a later write
would go through); in the page's process and in processes it forks. Each path is resolved as
the call resolves it: from its ``dir_fd``, through ``/proc/self/cwd``, ``//``, ``..`` and
symlinks (a descriptor: the file it is open on). The engine's own writes into the cache from
the page's process (memo's results) are made inside ``engine_writes()``. A process the page
starts (``subprocess``, ``os.system``) is not traced: a file named on its command line that has
changed (its size, time or inode) or appeared by the end of the block counts as its write, after
the fact. Not seen: what such a process writes under a name it was not given, writes by compiled
code that bypasses Python's ``open`` (a C library's own fopen), writes through descriptors opened
before the page ran or through a hard link a process made, and writes into an existing sqlite
database. The page's scratch folder, bytecode and the installed environment are not guarded.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
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
_ENGINE = str(Path(__file__).resolve().parents[1]) + os.sep  # its own imports (NumPy, psutil ...) are not a page's


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


NAMES = "="  # the env entry of the variables' names (iterating, len, a copy): no variable's name has a "="


def env_fingerprint(name: str, root: str, environment: Mapping[str, str] | None = None) -> str | None:
    """A variable's value in `environment` (default: this process's, as the page set it), or for
    NAMES every variable's name; stored as a hash: a variable may hold a secret."""
    variables = _environment() if environment is None else environment
    value = "\0".join(sorted(variables)) if name == NAMES else variables.get(name)
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


_HEADER = re.compile(r"^(Name|Version):[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def dist_fingerprint(name: str, root: str) -> str | None:
    """An installed distribution's version (None: not installed)."""
    try:
        found = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return _header(found).get("Version")


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
    """Each input the run read, by its portable name, with its fingerprint then (None: absent);
    `unseen`: why the run may have read what no entry names (no result of it is ever used)."""

    modules: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    dirs: dict[str, str | None] = field(default_factory=dict)
    probes: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    dists: dict[str, str | None] = field(default_factory=dict)  # name: version
    unseen: str = ""

    def changed(self, root: str | Path, now: dict[tuple[str, str], str | None] | None = None) -> str | None:
        """The first input that differs now in the checkout at `root`, in words (None if none).
        `now`: fingerprints taken a moment ago, shared by the manifests checked together (the
        pages of one build read many of the same modules)."""
        if self.unseen:
            return self.unseen
        root = str(root)
        now = {} if now is None else now
        for kind in KINDS:
            for name, recorded in getattr(self, kind).items():
                where = name if kind in ("env", "dists") else absolute(name, root)
                if (kind, where) not in now:
                    now[(kind, where)] = FINGERPRINT[kind](where, root)
                if now[(kind, where)] != recorded:
                    what = "the environment's variable names" if (kind, name) == ("env", NAMES) else \
                        f"{_WORDS[kind]} {name}"
                    return f"{what} changed"
        return None

    def paths(self, root: str | Path) -> list[str]:
        """Every file and folder named, absolute."""
        return [absolute(name, str(root)) for kind in KINDS if kind not in ("env", "dists")
                for name in getattr(self, kind)]

    def to_json(self) -> dict:
        return {**{kind: dict(sorted(getattr(self, kind).items())) for kind in KINDS}, "unseen": self.unseen}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(**{kind: dict(data[kind]) for kind in KINDS}, unseen=data.get("unseen", ""))


class Recorder:
    """Records what runs inside ``with recorder.recording():`` reads; recorders nest (a memoized
    call records its own inputs while the page's recorder sees them too). `environment`: what
    a variable read is fingerprinted in: the build's environment for a page (the engine's own
    variables, PYTHONHASHSEED, are then no input), or None: this process's, when read (a
    memoized call's, which the page's code may have set)."""

    def __init__(self, project: Path, roots: list[Path], ignored: list[Path], code_files: set[str],
                 refuse_writes: bool = False, cache: Iterable[Path] = (),
                 environment: Mapping[str, str] | None = None) -> None:
        self.project = str(Path(project).resolve())
        self.roots = [str(r.resolve()) for r in roots]
        self.ignored = [str(p.resolve()) for p in ignored] + _installed_prefixes()
        self.code_files = set(code_files)  # e.g. the page, whose code is compiled under its path
        self.seen = Manifest()
        self.environment = environment
        self.refuse_writes = refuse_writes
        self.cache = [str(Path(c).resolve()) for c in cache]  # the build's: only the engine writes there
        self.written: dict[str, int] = {}  # portable name: the page line that wrote it (0: unknown)
        self.named: dict[str, tuple[tuple | None, int]] = {}  # named to a process: its state then, the line

    def refuse_write(self, path: str) -> None:
        """Raise PermissionError for a write into the project or the cache (`path`: absolute and
        resolved; the write does not happen), and keep it: the page fails for it even if its code
        catches the error. A file of the cache is named by its absolute path."""
        if not (self.refuse_writes and self.guards(path)):
            return
        name = self._shown(path)
        self.written.setdefault(name, self._page_line())
        raise PermissionError(errno.EACCES, f"lessonlib: a page may not write {name}, in the project or the "
                              "build's cache; write into lessonlib.scratch() or publish with lessonlib.publish()", path)

    def guards(self, path: str) -> bool:
        """Is a write to this absolute, resolved path refused? Into the cache, unless the engine
        makes it (engine_writes); into the project, but for bytecode and the ignored folders
        (the scratch folder, the installed environment)."""
        if _within(path, self.cache):
            return not getattr(_engine, "writes", False)
        return (_within(path, self.roots) and not _within(path, self.ignored)
                and not path.endswith(".pyc") and "__pycache__" not in Path(path).parts)

    def note_named(self, path: str) -> None:
        """A file named on a process's command line, as it is before the process runs."""
        if not self.refuse_writes:
            return
        path = os.path.realpath(path)
        if self.guards(path) and not os.path.isdir(path):
            self.named.setdefault(path, (_state(path), self._page_line()))

    def first_write(self) -> tuple[str, int, bool] | None:
        """(name, line, by a process) of the first write under the project seen so far."""
        for name, line in self.written.items():
            return name, line, False
        for path, (before, line) in self.named.items():
            if _state(path) != before:
                return self._shown(path), line, True
        return None

    def _shown(self, path: str) -> str:
        """A written file's name: relative to the project, or absolute in the cache."""
        return path if _within(path, self.cache) else portable(path, self.project)

    def _page_line(self) -> int:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename not in self.code_files:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else 0

    @contextmanager
    def recording(self) -> Iterator[Recorder]:
        _install_hooks()
        outermost = not _active
        if outermost:  # modules imported before any recording: as they are now
            for file in self._project_modules():
                _first_seen("modules", file, self.project)
            _children_record(self)
        _active.append(self)
        try:
            yield self
        finally:
            _collect()  # what the processes started meanwhile read
            _active.remove(self)
            if outermost:
                _children_stop()

    def manifest(self, modules: list[str] | None = None, namespaces: Iterable[dict] = ()) -> Manifest:
        """What was read, as first seen. `modules`: module files to include (default: every
        project module imported in this process). The distributions are those that these
        modules, the engine's own left out, and `namespaces` (the page's globals) refer to."""
        files = self._project_modules() if modules is None else modules
        seen = Manifest(**{kind: dict(getattr(self.seen, kind)) for kind in KINDS}, unseen=self.seen.unseen)
        for file in files:
            seen.modules[portable(file, self.project)] = _first_seen("modules", file, self.project)
        wanted = set(files)
        project = [vars(m) for m in list(sys.modules.values())
                   if _module_file(m) in wanted and not _module_file(m).startswith(_ENGINE)]
        libraries = {name for name in referenced_modules([*namespaces, *project])
                     if not self.watches(_module_file(sys.modules.get(name)) or "")}
        seen.dists.update(distributions(libraries))
        return Manifest.from_json(seen.to_json())

    def note(self, kind: str, path: str) -> None:
        """An input read now: an absolute path, or a variable's name (NAMES: the names of all)."""
        name = path if kind == "env" else portable(path, self.project)
        if name in getattr(self.seen, kind) or (kind != "env" and not self.watches(path)):
            return
        self._keep(kind, name, env_fingerprint(name, "", self.environment) if kind == "env" else
                   _first_seen(kind, path, self.project))

    def _keep(self, kind: str, name: str, fingerprint: str | None) -> None:
        """The first fingerprint of an input is kept (and, in a process the page started, sent to it)."""
        entries = getattr(self.seen, kind)
        if name not in entries:
            entries[name] = fingerprint
            _log([kind, name, fingerprint])

    def note_unseen(self, cause: str) -> None:
        """The page may read what the engine cannot see: `cause`, at the page's line if it is known."""
        if not self.seen.unseen:
            line = self._page_line()
            self.seen.unseen = f"line {line} {cause}" if line else f"it {cause}"
            _log(["unseen", self.seen.unseen, None])

    def add(self, manifest: Manifest) -> None:
        """Inputs read elsewhere (a memoized call's, or a process's), unless read here first; a
        variable's value as this recorder sees variables."""
        for kind in KINDS:
            for name, fingerprint in getattr(manifest, kind).items():
                if kind == "env":
                    self.note(kind, name)
                elif kind == "dists" or self.watches(absolute(name, self.project)):
                    self._keep(kind, name, fingerprint)
        if manifest.unseen and not self.seen.unseen:
            self.seen.unseen = manifest.unseen

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
    """The installed distributions that provide these top-level packages, with their versions:
    each distribution is asked for these names alone, where importlib.metadata.packages_distributions()
    would map every package of every installed distribution, in each page's process."""
    wanted = set(packages)
    names = {_header(dist).get("Name") for dist in importlib.metadata.distributions() if _provides(dist, wanted)}
    return {name: _first_seen("dists", name, "") for name in sorted(names - {None})}


def _provides(dist: importlib.metadata.Distribution, packages: set[str]) -> bool:
    """Whether the distribution installs one of these top-level packages: by its top_level.txt,
    else by a .py file its RECORD lists at that name or under it (packages_distributions' rule)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return not packages.isdisjoint(declared)
    record = "\n" + (dist.read_text("RECORD") or "")
    return any(re.search(rf"\n{re.escape(p)}(?:/[^,\n]*)?\.py,", record) for p in packages)


def _header(dist: importlib.metadata.Distribution) -> dict[str, str]:
    """Name and Version from the metadata's header alone: parsing whole files as e-mail
    (Distribution.metadata) is slow."""
    header = (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").split("\n\n", 1)[0]
    return dict(_HEADER.findall(header))


def note(manifest: Manifest) -> None:
    """Add inputs read elsewhere (a memoized call's, when its stored result is used) to every
    recorder now recording."""
    for recorder in _active:
        recorder.add(manifest)


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
_engine = threading.local()  # inside engine_writes(): the engine writes into its cache


@contextmanager
def engine_writes() -> Iterator[None]:
    """The engine's own writes into the cache from a page's process (memo's results, locks and
    keys), in this thread: let through, where the page's are refused."""
    before = getattr(_engine, "writes", False)
    _engine.writes = True
    try:
        yield
    finally:
        _engine.writes = before


def _within(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f + os.sep) for f in folders)


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
    sys.meta_path.insert(0, _LookedFor)
    _recording_the_environment()
    os.mkfifo, os.mknod = _raising("os.mkfifo", os.mkfifo), _raising("os.mknod", os.mknod)
    os.open = _opening_at(os.open)
    os.stat = _probing(os.stat)  # exists, isfile, getsize, Path.stat ... (no audit event for these)
    os.lstat = _probing(os.lstat)
    os.access = _probing(os.access)


def _raising(event: str, real: Callable) -> Callable:
    """`real`, which raises no audit event of its own, raising `event` with (path, dir_fd)."""
    @functools.wraps(real)
    def call(path: object, *args: object, dir_fd: int | None = None, **kwargs: object) -> object:
        if _active:
            sys.audit(event, path, dir_fd)
        return real(path, *args, dir_fd=dir_fd, **kwargs)

    return call


def _opening_at(real: Callable) -> Callable:
    """os.open, whose "open" event names a path relative to `dir_fd` as if to the working folder:
    raised with the path in full instead."""
    @functools.wraps(real)
    def call(path: object, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if dir_fd is None or not _active:
            return real(path, flags, mode, dir_fd=dir_fd)
        sys.audit("open", _at(path, dir_fd), None, flags)
        with _quietly():  # its own event, relative to the descriptor, is not seen again
            return real(path, flags, mode, dir_fd=dir_fd)

    return call


def _probing(real: Callable) -> Callable:
    def probe(path: object, *args: object, **kwargs: object) -> object:
        try:
            return real(path, *args, **kwargs)
        finally:
            if _active and isinstance(path, (str, bytes, os.PathLike)):
                with _quietly() as quiet:
                    if quiet:
                        _note("probes", path, kwargs.get("dir_fd"))

    return probe


def _recording_the_environment() -> None:
    """os.environ's and os.environb's methods: a variable read by its name (get, in, [...]); the
    names of all read by iterating or counting them; and all of it shown (repr). A copy or a
    dict() reads the names, then each variable by its name."""
    methods = os._Environ
    getitem, iterate, count, show = methods.__getitem__, methods.__iter__, methods.__len__, methods.__repr__

    def read(self: os._Environ, key: str) -> str:
        _note_variables(self, [key])
        return getitem(self, key)

    def names(self: os._Environ) -> Iterator[str]:
        _note_variables(self, [NAMES])
        return iterate(self)

    def length(self: os._Environ) -> int:
        _note_variables(self, [NAMES])
        return count(self)

    def shown(self: os._Environ) -> str:
        _note_variables(self, [NAMES, *iterate(self)])
        return show(self)

    methods.__getitem__, methods.__iter__, methods.__len__, methods.__repr__ = read, names, length, shown


def _note_variables(mapping: object, keys: list[str | bytes]) -> None:
    """Variables the page's or the project's code read: every recorder now recording records them
    (a library reads them for its own purposes, and is pinned by the environment fingerprint)."""
    if _active and (mapping is os.environ or mapping is os.environb):
        with _quietly() as quiet:
            if quiet and _by_project_code():
                for recorder in _active:
                    for key in keys:
                        recorder.note("env", os.fsdecode(key))


class _LookedFor:
    """First on sys.meta_path: a module the page's or the project's code looks for (an import,
    importlib.util.find_spec), found or not, is looked for where the import system will look: a
    file or folder of its name in each folder on its path (sys.path, or its package's) is probed,
    and one that is absent is an input too (an optional helper added later). Finds nothing."""

    @staticmethod
    def find_spec(name: str, path: Iterable[str] | None = None, target: object = None) -> None:
        if _active:
            with _quietly() as quiet:
                if quiet and _by_project_code():
                    _note_lookup(name.rpartition(".")[2], sys.path if path is None else path)


def _note_lookup(name: str, folders: Iterable[object]) -> None:
    for folder in folders:
        if isinstance(folder, str) and os.path.isdir(folder or "."):  # "": the working folder
            for suffix in _MODULE_SUFFIXES:
                _note("probes", os.path.join(folder, name + suffix))


_MODULE_SUFFIXES = ("", *importlib.machinery.SOURCE_SUFFIXES, *importlib.machinery.EXTENSION_SUFFIXES)
_STDLIB = os.path.dirname(os.__file__)


def _by_project_code() -> bool:
    """Did the page's or the project's code ask? The nearest frame outside this module, the import
    system and the standard library (os.getenv, subprocess.run, importlib.import_module ...)."""
    frame = sys._getframe(1)
    while frame is not None and _passed_through(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and any(r.is_project_code(frame.f_code.co_filename) for r in _active)


def _passed_through(filename: str) -> bool:
    if filename == __file__ or filename.startswith("<frozen "):
        return True
    inside = filename.startswith(_STDLIB + os.sep)
    return inside and filename[len(_STDLIB) + 1:].partition(os.sep)[0] not in ("site-packages", "dist-packages")


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
        _refuse(path, follow=True)
    if isinstance(path, (str, bytes, os.PathLike)) and _is_read(mode, flags):
        source = _compiled_from(path)  # an import reads a module's bytecode alone while it is up to date
        _note("modules", source) if source else _note("files", path)


def _compiled_from(path: str | bytes | os.PathLike) -> str | None:
    with contextlib.suppress(ValueError):  # not bytecode in a __pycache__ folder
        return importlib.util.source_from_cache(os.fsdecode(path)) if os.fsdecode(path).endswith(".pyc") else None
    return None


def _refuse(path: object, dir_fd: object = None, follow: bool = False) -> None:
    """Refuse a write to `path` in the project or the cache: the file it leads to (`follow`, for a
    change of a file's content or metadata) or the name itself (made, removed or renamed)."""
    where = _resolved(path, dir_fd, follow)
    if where is not None:
        for recorder in _active:
            recorder.refuse_write(where)


def _resolved(path: object, dir_fd: object = None, follow: bool = False) -> str | None:
    """Where the call lands: from `dir_fd`, through /proc/self/cwd, "//", ".." and symlinks, the
    last one too if `follow`; a descriptor, the file it is open on. None: not a path."""
    if isinstance(path, int):
        path, dir_fd, follow = f"/proc/self/fd/{path}", None, True
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None
    name = _at(path, dir_fd)
    if follow:
        return os.path.realpath(name)
    folder, last = os.path.split(os.path.abspath(name))
    return os.path.join(os.path.realpath(folder), last)


def _at(path: str | bytes | os.PathLike, dir_fd: object) -> str:
    """The path, in full where it is relative to a folder's descriptor."""
    name = os.fsdecode(path)
    if isinstance(dir_fd, int) and dir_fd != -1 and not os.path.isabs(name):
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        except OSError:  # not Linux: left relative
            pass
    return name


def _link_target(target: object, link: object, dir_fd: object) -> str | None:
    """Where a symlink made at `link` points: `target`, relative to the link's folder."""
    if not isinstance(target, (str, bytes, os.PathLike)) or not isinstance(link, (str, bytes, os.PathLike)):
        return None
    return os.path.join(os.path.dirname(os.path.abspath(_at(link, dir_fd))), os.fsdecode(target))


def _on_bind(args: tuple) -> None:
    """A unix socket's address is a name in the file system (but for the abstract namespace's)."""
    address = args[1]
    if isinstance(address, (str, bytes)) and address and address[:1] not in ("\0", b"\0"):
        _refuse(address)


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
    if not _by_the_import_system(lister):
        _note("dirs", path)  # a descriptor too (os.fwalk lists those)


_RECORDERS: dict[str, Callable[[tuple], None]] = {
    "open": _on_open,
    "os.listdir": _on_listing,
    "os.scandir": _on_listing,
    "sqlite3.connect": lambda args: _note_database(args[0]),
    "subprocess.Popen": lambda args: _on_process(*args),  # (executable, args, cwd, env)
    "os.posix_spawn": lambda args: _on_process(args[0], args[1], None, args[2]),  # (path, argv, env)
    "os.system": lambda args: _on_process("sh", args[0], None, None),  # (command,), which sh runs
    "os.exec": lambda args: _on_process(args[0], args[1], None, args[2]),  # (path, args, env): in a forked process
    # writes, refused in the project and the cache. A name made, removed or renamed:
    "os.rename": lambda args: (_refuse(args[0], args[2]), _refuse(args[1], args[3])),  # (src, dst, their dir_fds)
    "os.remove": lambda args: _refuse(args[0], args[1]),  # (path, dir_fd)
    "os.rmdir": lambda args: _refuse(args[0], args[1]),
    "os.mkdir": lambda args: _refuse(args[0], args[2]),  # (path, mode, dir_fd)
    "os.mkfifo": lambda args: _refuse(args[0], args[1]),  # raised by _raising: (path, dir_fd)
    "os.mknod": lambda args: _refuse(args[0], args[1]),
    "socket.bind": _on_bind,  # (socket, address)
    "shutil.rmtree": lambda args: _refuse(args[0], args[1] if len(args) > 1 else None),
    # a link (the name, and what it makes an alias of), and a file's content or metadata (a path or a descriptor):
    "os.symlink": lambda args: (_refuse(args[1], args[2]), _refuse(_link_target(*args), follow=True)),
    "os.link": lambda args: (_refuse(args[0], args[2], follow=True), _refuse(args[1], args[3])),
    "os.truncate": lambda args: _refuse(args[0], follow=True),  # (path, length)
    "os.chmod": lambda args: _refuse(args[0], args[2], follow=True),  # (path, mode, dir_fd)
    "os.chown": lambda args: _refuse(args[0], args[3], follow=True),  # (path, uid, gid, dir_fd)
    "os.utime": lambda args: _refuse(args[0], args[3], follow=True),  # (path, times, ns, dir_fd)
    "os.chflags": lambda args: _refuse(args[0], follow=True),
    "os.setxattr": lambda args: _refuse(args[0], follow=True),
    "os.removexattr": lambda args: _refuse(args[0], follow=True),
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


def _on_process(program: object, argv: object, cwd: object, env: object) -> None:
    """A process started. Unless it records its own reads (_traced), what it reads is not seen:
    if the page's or the project's code started it, no recording now is ever used."""
    _note_command(argv, cwd)
    if isinstance(program, (str, bytes, os.PathLike)) and not _traced(program, argv, env) and _by_project_code():
        for recorder in _active:
            recorder.note_unseen(f"starts {os.path.basename(os.fsdecode(program))}, a process whose reads "
                                 "the engine cannot see")


def _note_command(command: object, cwd: object) -> None:
    """Files a process is given by name on its command line: what it may write."""
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


def _note(kind: str, path: object, dir_fd: object = None) -> None:
    """A path read: relative to the working folder or to `dir_fd`, or a descriptor (an int) for
    the file it is open on; "//x" is "/x"; a path outside the project that leads into it
    (/proc/self/cwd/..., a link from outside) is named by where it leads."""
    if isinstance(path, int):
        path = f"/proc/self/fd/{path}"
    elif not isinstance(path, (str, bytes, os.PathLike)):
        return
    where = "/" + os.path.abspath(_at(path, dir_fd)).lstrip("/")
    if not any(r.watches(where) or _within(where, r.ignored) for r in _active):
        where = os.path.realpath(where)
    for recorder in _active:
        recorder.note(kind, where)


# --- the processes a page starts ----------------------------------------------------------------
# A Python process started with this interpreter imports `sitecustomize` from PYTHONPATH as it
# starts. While a recording runs, PYTHONPATH leads to one the page's process made, in a folder of
# its own beside the recorder's settings: it installs these hooks in that process, which appends
# each input it reads (a file, a module, a variable's name, or why it cannot be seen) to its own
# log there, one JSON line each. A process forked from the page's writes its log too. The page's
# process adds the logs to its recorders when a recording ends, when every process started
# meanwhile has read what it returned (joblib's workers have sent back their results). Any other
# process (a shell, a compiled program, Python with -E, -I or -S, or an environment without that
# PYTHONPATH) reads what the engine cannot see (Recorder.note_unseen).

@dataclass(frozen=True)
class _Children:
    folder: str  # path/sitecustomize.py, settings.json, reads/PID.jsonl
    owner: int | None  # the process that made it (None: in a process it started)

    @property
    def path(self) -> str:
        return os.path.join(self.folder, "path")


_children: _Children | None = None
_log_file: tuple[int, int] | None = None  # (pid, descriptor): this process's log, in a process the page started
_collected: dict[str, int] = {}  # each log's bytes added so far
_SITECUSTOMIZE = "from lessonlib.engine.worker import inputs\n\ninputs.child_started(__file__)\n"


def _children_record(recorder: Recorder) -> None:
    """From now on, the Python processes this one starts record what they read as `recorder` does."""
    global _children
    if _children is None:
        folder = tempfile.mkdtemp(prefix="lessonlib-reads-")
        os.mkdir(os.path.join(folder, "reads"))
        os.mkdir(os.path.join(folder, "path"))
        Path(folder, "path", "sitecustomize.py").write_text(_SITECUSTOMIZE)
        _children = _Children(folder, os.getpid())
        atexit.register(_children_removed, _children)
    settings = {"project": recorder.project, "roots": recorder.roots, "ignored": recorder.ignored,
                "code_files": sorted(recorder.code_files)}
    Path(_children.folder, "settings.json").write_text(json.dumps(settings))
    os.environ["PYTHONPATH"] = os.pathsep.join([_children.path, *filter(None, [os.environ.get("PYTHONPATH")])])


def _children_stop() -> None:
    """The processes started from now on are not recorded (those started before still are)."""
    value = _without_ours(os.environ.get("PYTHONPATH"))
    if value is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = value


def _children_removed(children: _Children) -> None:
    if children.owner == os.getpid():  # not in a forked process
        shutil.rmtree(children.folder, ignore_errors=True)


def _without_ours(pythonpath: str | None) -> str | None:
    kept = [p for p in (pythonpath or "").split(os.pathsep) if _children is None or p != _children.path]
    return os.pathsep.join(kept) or None


def _environment() -> dict[str, str]:
    """This process's variables as the page set them: PYTHONPATH without the children's folder."""
    with _quietly():
        variables = dict(os.environ)
    pythonpath = _without_ours(variables.pop("PYTHONPATH", None))
    return variables if pythonpath is None else {**variables, "PYTHONPATH": pythonpath}


def child_started(sitecustomize: str) -> None:
    """In a Python process the page started, as it starts (its sitecustomize): record what it
    reads as the page's recorder does, the code it runs with -c or as its script included, into
    its log; then import the sitecustomize that this one hides, if there is one."""
    global _children
    path = os.path.dirname(os.path.abspath(sitecustomize))
    _children = _Children(os.path.dirname(path), owner=None)
    settings = json.loads(Path(_children.folder, "settings.json").read_text())
    script = [os.path.abspath(sys.argv[0])] if sys.argv and os.path.isfile(sys.argv[0]) else []
    _install_hooks()
    _active.append(Recorder(Path(settings["project"]), [Path(r) for r in settings["roots"]],
                            [Path(p) for p in settings["ignored"]], {*settings["code_files"], "<string>", *script}))
    sys.path.remove(path)
    if importlib.machinery.PathFinder.find_spec("sitecustomize") is not None:
        del sys.modules["sitecustomize"]
        importlib.import_module("sitecustomize")


def _log(entry: list) -> None:
    """In a process the page started: an input it read, for the page's process."""
    global _log_file
    if _children is None or _children.owner == os.getpid():
        return
    if _log_file is None or _log_file[0] != os.getpid():
        name = os.path.join(_children.folder, "reads", f"{os.getpid()}.jsonl")
        try:
            _log_file = os.getpid(), os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC)
        except OSError:  # the page has ended, and its folder is gone
            return
    os.write(_log_file[1], json.dumps(entry).encode() + b"\n")


def _collect() -> None:
    """Add what the processes this one started have logged since last time to every recorder now
    recording."""
    if _children is None or _children.owner != os.getpid():
        return
    found = Manifest()
    with _quietly():
        for log in sorted(Path(_children.folder, "reads").iterdir()):
            with open(log, "rb") as f:
                f.seek(_collected.get(log.name, 0))
                data = f.read()
            lines = data[:data.rfind(b"\n") + 1]  # a line being written is read next time
            _collected[log.name] = _collected.get(log.name, 0) + len(lines)
            for line in lines.splitlines():
                kind, name, fingerprint = json.loads(line)
                if kind == "unseen":
                    found.unseen = found.unseen or name
                else:
                    getattr(found, kind).setdefault(name, fingerprint)
    for recorder in _active:
        recorder.add(found)


def _traced(program: str | bytes | os.PathLike, argv: object, env: object) -> bool:
    """Does this process record its own reads? This Python (its file, beside sys.executable),
    given the children's PYTHONPATH, with no option that ignores it."""
    variables = os.environ if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in dict(env).items()}
    found = shutil.which(os.fsdecode(program), path=variables.get("PATH"))
    if (_children is None or found is None or os.path.dirname(os.path.abspath(found)) != os.path.dirname(sys.executable)
            or not os.path.samefile(found, sys.executable)):
        return False
    words = [os.fsdecode(w) for w in argv] if isinstance(argv, (list, tuple)) else []
    return _children.path in variables.get("PYTHONPATH", "").split(os.pathsep) and not ignores_pythonpath(words)


def ignores_pythonpath(argv: list[str]) -> bool:
    """Python's options before what it runs (argv[0] is Python): -E, -I or -S, alone or grouped
    (-IS), start it without PYTHONPATH or without sitecustomize."""
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-") or word.startswith("--") or word == "-":
            return False
        for n, letter in enumerate(word[1:]):
            if letter in "EIS":
                return True
            if letter in "cm":  # what it runs follows
                return False
            if letter in "WX":  # its value follows, in this word or the next
                if n == len(word) - 2:
                    next(words, None)
                break
    return False

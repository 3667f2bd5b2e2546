"""Memoize expensive experiment functions across builds, without ever returning a stale result.

A call is looked up by the function and what it carries (its code, not its line numbers; its
defaults, closure cells, bound self, partial arguments: lessonlib.engine.worker.fingerprint) and its
arguments; a callable or an argument that cannot be fingerprinted is refused. The stored result
is used only while everything the call reached is unchanged, as recorded during the run that
produced it, like a page's inputs (lessonlib.engine.worker.inputs): the project modules whose code ran
(with the project modules they reference, which covers work sent to worker processes), the
page's functions it called (by code), the page's globals those read (by value), the files and
folders it read and the environment variables the project's code read.

A memoized call always starts from seed 0 and leaves the caller's random state as it found it,
so a hit and a miss leave every later random draw, and so every later output, the same; what the
call printed (sys.stdout and sys.stderr, the page's output) is stored and printed again on a hit.
Pages running side by side that make the same call compute it once: the second waits for the
first's result (a lock per call).
Where results are stored: set by the page's worker; elsewhere (a notebook, a test) the
LESSONLIB_CACHE_DIR environment variable, and without it the function simply runs. A stored
entry is sealed (lessonlib.engine.worker.store.seal), its result's bytes with it: a result is
unpickled only when the engine stored it, never one that a page, its subprocess or another
program wrote there. The page's own writes into the cache are refused; the memo's are made
inside engine_writes().
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import random
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import joblib

from lessonlib.engine.config import SEED, environment_settings
from lessonlib.engine.worker import capture
from lessonlib.engine.worker.after_import import cancel, when_imported
from lessonlib.engine.worker.capture import terminal
from lessonlib.engine.worker.fingerprint import (
    Unfingerprintable,
    callable_fingerprint,
    value_fingerprint,
)
from lessonlib.engine.worker.inputs import Manifest, Recorder, engine_writes, note
from lessonlib.engine.worker.store import (
    cache_errors,
    discard,
    environment_fingerprint,
    file_lock,
    seal,
    sealed,
    source_fingerprint,
    temporary_beside,
    touch,
    write_atomically,
)

F = TypeVar("F", bound=Callable)


@dataclass
class MemoStore:
    root: Path  # .../memo
    project: Path  # the project's root: manifests name paths relative to it
    roots: list[Path]  # the project's source roots, as for a page's inputs
    ignored: list[Path]  # e.g. the cache itself
    page_namespace: dict | None = None  # where the page's functions live
    refresh: bool = False  # run even when a valid result is stored (LESSONLIB_REFRESH=1)
    environment: str = field(default_factory=lambda: environment_fingerprint(environment_settings().device))


# What a key means: the code that makes it and the code that records what a call read.
_OWN_CODE = source_fingerprint("worker/memo", "worker/fingerprint", "worker/inputs")
# The engine runs and watches a call (its tracer, its captured output, linecache's checks of its
# files when a warning is shown) but computes none of its result: no engine file is an input.
_ENGINE = Path(__file__).resolve().parents[1]
_store: ContextVar[MemoStore | None] = ContextVar("memo_store", default=None)
_locking: ContextVar[bool] = ContextVar("memo_locking", default=False)  # inside a locked call


def memo(func: F) -> F:
    """``memo(train)(steps=600)`` or ``@memo``: the result of the call, computed once."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        store = _store.get() or _store_from_environment()
        with _seeded_and_restored():
            return func(*args, **kwargs) if store is None else _call(store, func, args, kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def memo_store(store: MemoStore | None) -> Iterator[None]:
    token = _store.set(store)
    try:
        yield
    finally:
        _store.reset(token)


def _store_from_environment() -> MemoStore | None:
    settings = environment_settings()
    if settings.cache_dir is None:
        return None
    main, cache_dir = sys.modules.get("__main__"), settings.cache_dir
    return MemoStore(cache_dir / "memo", _package_root(), [_package_root()], [cache_dir],
                     getattr(main, "__dict__", None))


def _package_root() -> Path:
    return Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """Random draws made inside leave every draw after it as it would have been: Python's and,
    where they are installed, NumPy's and torch's generators (CUDA's too, once in use) are put
    back on the way out."""
    state = random.getstate()
    with _numpy_state_kept(), _torch_rng_forked():
        try:
            yield
        finally:
            random.setstate(state)


@contextlib.contextmanager
def _numpy_state_kept() -> Iterator[None]:
    if importlib.util.find_spec("numpy") is None:  # a site without NumPy
        yield
        return
    import numpy

    state = numpy.random.get_state()
    try:
        yield
    finally:
        numpy.random.set_state(state)


@contextlib.contextmanager
def _torch_rng_forked() -> Iterator[None]:
    """torch's generators kept, where torch is loaded; where it is first imported inside (a page
    that never needs torch never imports it), its generator as it was just after the import."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_initialized() else []):
            yield
        return
    imported: list = []
    pending = when_imported("torch", lambda torch: imported.append(torch.random.get_rng_state()))
    try:
        yield
    finally:
        cancel(pending)
        if imported:
            sys.modules["torch"].random.set_rng_state(imported[0])


@contextlib.contextmanager
def _seeded_and_restored() -> Iterator[None]:
    with random_state_kept():
        random.seed(SEED)
        if importlib.util.find_spec("numpy") is not None:
            import numpy

            numpy.random.seed(SEED)
        pending = when_imported("torch", lambda torch: torch.manual_seed(SEED))
        try:
            yield
        finally:
            cancel(pending)


# --- the stored call ---------------------------------------------------------------------------

def _call(store: MemoStore, func: Callable, args: tuple, kwargs: dict) -> Any:
    name = callable_name(func)
    facts = [name, *_fingerprints(name, func, args, kwargs), store.environment, _OWN_CODE]
    key = hashlib.sha256(json.dumps(facts).encode()).hexdigest()
    entry_path, result_path = store.root / f"{key}.json", store.root / f"{key}.pkl"
    stored = _MISSING if store.refresh else _stored_result(store, entry_path, result_path)
    if stored is not _MISSING:
        return stored
    if _locking.get():  # inside another memoized call: a second lock could deadlock with a page
        # that takes the two in the other order
        return _run_and_store(store, name, func, args, kwargs, entry_path, result_path)
    with cache_errors(store.root), engine_writes():
        lock = file_lock(store.root / f"{key}.lock", wait=False)
    if lock is None:  # on the build's terminal, like a progress bar (sys.stderr is the page's output)
        print(f"{name}: waiting for another page that is computing the same call", file=terminal(), flush=True)
        with engine_writes():
            lock = file_lock(store.root / f"{key}.lock")
    token = _locking.set(True)
    try:  # another page may have stored it while this one waited
        stored = _MISSING if store.refresh else _stored_result(store, entry_path, result_path)
        if stored is not _MISSING:
            return stored
        return _run_and_store(store, name, func, args, kwargs, entry_path, result_path)
    finally:
        _locking.reset(token)
        lock.release()


def callable_name(func: Callable) -> str:
    """Module and qualified name; a page's own function by its name alone."""
    if isinstance(func, functools.partial):
        return f"partial({callable_name(func.func)})"
    func = getattr(func, "__func__", func)  # a bound method: its function
    qualname = getattr(func, "__qualname__", None) or type(func).__qualname__
    module = getattr(func, "__module__", None) or ""
    return f"{module}.{qualname}" if getattr(sys.modules.get(module), "__file__", None) else qualname


def _fingerprints(name: str, func: Callable, args: tuple, kwargs: dict) -> tuple[str, str]:
    """The callable's and the arguments' fingerprints; refused, in words, when either has none."""
    try:
        carried = callable_fingerprint(func)
    except Unfingerprintable as e:
        raise TypeError(f"lessonlib.memo cannot fingerprint {name}: {e}. Memoize a function whose "
                        "bound self, defaults, closure and partial arguments can be pickled") from None
    try:
        return carried, value_fingerprint((args, kwargs))
    except Unfingerprintable as e:
        raise TypeError(f"lessonlib.memo cannot fingerprint the arguments of {name}: {e}. "
                        "Pass values that can be pickled") from None


def _stored_result(store: MemoStore, entry_path: Path, result_path: Path) -> Any:
    with engine_writes():  # a damaged entry is removed, a valid one marked used (for prune)
        entry = _valid_entry(store, entry_path, result_path)
        if entry is None:
            return _MISSING
        touch(entry_path)
    note(Manifest.from_json(entry["manifest"]))  # the page depends on what the call read
    result = joblib.load(result_path)
    for stream, text in entry["printed"]:
        getattr(sys, stream).write(text)
    return result


def _run_and_store(store: MemoStore, name: str, func: Callable, args: tuple, kwargs: dict,
                   entry_path: Path, result_path: Path) -> Any:
    recorder = Recorder(store.project, store.roots, [*store.ignored, _ENGINE], code_files=set())
    started = time.perf_counter()
    with recorder.recording(), _CodeTracer(recorder) as tracer, _kept_output() as printed:
        result = func(*args, **kwargs)
    seconds = time.perf_counter() - started
    page_code = tracer.page_code(store)
    namespaces = [store.page_namespace] if page_code and store.page_namespace else []
    manifest = recorder.manifest(modules=tracer.module_files(), namespaces=namespaces)
    entry = {"function": name, "manifest": manifest.to_json(), "printed": printed,
             "code": page_code, "globals": tracer.page_globals(store)}
    tmp = temporary_beside(result_path)
    with cache_errors(store.root), engine_writes():  # a full disk is the cache's fault, not the lesson's line
        try:
            store.root.mkdir(parents=True, exist_ok=True)
            joblib.dump(result, tmp)
            entry["result_sha256"] = hashlib.sha256(tmp.read_bytes()).hexdigest()
            entry["seal"] = seal(store.root, _canonical(entry))
            os.replace(tmp, result_path)
            write_atomically(entry_path, json.dumps(entry))
        finally:
            tmp.unlink(missing_ok=True)
    # on the build's terminal: which of a page's calls cost what, for an author sizing an experiment
    print(f"{name}: computed in {seconds:.1f} s", file=terminal(), flush=True)
    return result


@contextlib.contextmanager
def _kept_output() -> Iterator[list[list[str]]]:
    """What is printed to sys.stdout and sys.stderr meanwhile, in order: [[stream, text], ...].
    In a page's block, all the block wrote meanwhile, at the descriptors too (a subprocess's
    output), as one stdout text: a hit shows the page what a miss showed it."""
    printed: list[list[str]] = []
    start = capture.offset()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(sys.stdout, "stdout", printed), _Tee(sys.stderr, "stderr", printed)
    try:
        yield printed
    finally:
        sys.stdout, sys.stderr = streams
        if start is not None:
            printed[:] = [["stdout", text]] if (text := capture.written_since(start)) else []


class _Tee:
    """A stream that writes through and keeps what it wrote, as the stream named `name`."""

    def __init__(self, stream: Any, name: str, printed: list[list[str]]) -> None:
        self._stream, self._name, self._printed = stream, name, printed

    def write(self, text: str) -> int:
        if self._printed and self._printed[-1][0] == self._name:
            self._printed[-1][1] += text
        else:
            self._printed.append([self._name, text])
        return self._stream.write(text)

    def __getattr__(self, attribute: str) -> Any:  # flush, isatty, encoding: the stream's own
        return getattr(self._stream, attribute)


def _valid_entry(store: MemoStore, entry_path: Path, result_path: Path) -> dict | None:
    for path in (entry_path, result_path):
        if not path.is_file():  # absent, or a folder or a pipe in its place (reading a pipe would hang)
            discard(path)
            return None
    try:
        entry = json.loads(entry_path.read_text(encoding="utf-8"))
        if not sealed(store.root, entry.pop("seal", None), _canonical(entry)):  # not stored by the engine
            return None
        if hashlib.sha256(result_path.read_bytes()).hexdigest() != entry["result_sha256"]:
            return None
        manifest = Manifest.from_json(entry["manifest"])
        if not all(stream in ("stdout", "stderr") and isinstance(text, str) for stream, text in entry["printed"]):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    namespace = store.page_namespace or {}
    same_code = all(_page_function_hash(namespace, q) == h for q, h in entry["code"].items())
    same_globals = all(_value_hash(namespace.get(n, _MISSING)) == h for n, h in entry["globals"].items())
    return entry if same_code and same_globals and manifest.changed(store.project) is None else None


def _canonical(entry: dict) -> bytes:
    """What an entry's seal covers: all of it, its result's digest included."""
    return json.dumps(entry, sort_keys=True).encode()


# --- what a call reached -----------------------------------------------------------------------

class _MissingType:
    pass


_MISSING = _MissingType()


def _value_hash(value: object) -> str | None:
    if value is _MISSING:
        return None
    try:
        return value_fingerprint(value)
    except Unfingerprintable:  # cannot be checked: never trust a stored result over it
        return f"unhashable:{id(value)}"


def _page_function_hash(namespace: dict, qualname: str) -> str | None:
    """A page function (or method of a page class) by what it carries: code, defaults, closure."""
    target: object = namespace
    for part in qualname.split("."):
        target = target.get(part) if isinstance(target, dict) else getattr(target, part, None)
    if not isinstance(target, types.FunctionType):
        return None
    try:
        return callable_fingerprint(target)
    except Unfingerprintable:
        return f"unhashable:{id(target)}"


class _CodeTracer:
    """Which code runs during the call (sys.setprofile sees every Python function called)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.codes: set[types.CodeType] = set()

    def __enter__(self) -> _CodeTracer:
        self.previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self.previous)
        enclosing = getattr(self.previous, "__self__", None)
        if isinstance(enclosing, _CodeTracer):  # a memoized call inside another: the outer one ran this code too
            enclosing.codes |= self.codes

    def _profile(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            self.codes.add(frame.f_code)

    def _is_page_code(self, code: types.CodeType) -> bool:
        """The page's own functions: not a project file, not an installed one, not generated
        (frozen modules, dataclass and namedtuple methods: "<...>")."""
        filename = code.co_filename
        if filename.startswith("<") or (os.path.isabs(filename) and self.recorder.watches(filename)):
            return False
        return not any(filename.startswith(p) for p in self.recorder.ignored)

    def page_code(self, store: MemoStore) -> dict[str, str]:
        """Top-level page functions (and methods of page classes) called, by their code."""
        namespace = store.page_namespace or {}
        reached = {c.co_qualname for c in self.codes if self._is_page_code(c) and "<" not in c.co_qualname}
        return {q: h for q in sorted(reached) if (h := _page_function_hash(namespace, q)) is not None}

    def page_globals(self, store: MemoStore) -> dict[str, str | None]:
        """The page's global values (not functions, classes or modules) read by page code called."""
        namespace = store.page_namespace or {}
        names = {n for c in self.codes if self._is_page_code(c) for n in _all_names(c)}
        return {n: _value_hash(namespace[n]) for n in sorted(names)
                if n in namespace and not isinstance(namespace[n], (types.FunctionType, type, types.ModuleType))}

    def module_files(self) -> list[str]:
        """Project files whose code ran, and the project modules those reference (what their code
        can run elsewhere, e.g. in worker processes); never the engine's (the recorder ignores
        them)."""
        files = {c.co_filename for c in self.codes if os.path.isabs(c.co_filename)
                 and self.recorder.watches(c.co_filename)}
        by_file = {os.path.abspath(m.__file__): m for m in list(sys.modules.values())
                   if isinstance(getattr(m, "__file__", None), str)}
        pending = list(files)
        while pending:
            module = by_file.get(os.path.abspath(pending.pop()))
            for value in vars(module).values() if module else ():
                source = sys.modules.get(getattr(value, "__module__", None) or getattr(value, "__name__", ""))
                file = getattr(source, "__file__", None)
                if isinstance(file, str) and self.recorder.watches(os.path.abspath(file)) and file not in files:
                    files.add(file)
                    pending.append(file)
        return sorted(os.path.abspath(f) for f in files)


def _all_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _all_names(const)
    return names

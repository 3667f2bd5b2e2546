"""What the build and the pages' workers both use to keep files in the cache: atomic writes,
locks, versioned and sealed files, the fingerprints of the environment and of engine code, and the
cache's errors in one line. A worker imports this module (through lessonlib.engine.worker.memo), so
an edit here re-runs every page; the page cache itself (lessonlib.engine.builder.cache) is build-side.

What the engine keeps in the cache is sealed (``seal``: an HMAC under a secret key of the folder
it is kept in, made once by the first build that writes there): an entry that another program, a
page's subprocess or another page wrote is no entry at all, however well it imitates one. The
key is not hidden from a page that looks for it; a page simply never writes a valid entry by
accident, and a page's own writes into the cache are refused (lessonlib.engine.worker.inputs).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import platform
import secrets
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from lessonlib.engine.config import SEED
from lessonlib.engine.worker.errors import SetupError

FORMAT = 5  # bump when the stored layout or the rendering contract changes
ENGINE = Path(__file__).parents[1]


def environment_fingerprint(device: str) -> str:
    """What every page depends on besides its own inputs: Python, the machine's kind, the device,
    the seed and the cache's format. Installed versions are inputs of the pages and calls whose
    code refers to them (lessonlib.engine.worker.inputs), not of every key."""
    facts = [FORMAT, platform.python_version(), platform.machine(), device, SEED]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()


def source_fingerprint(*modules: str) -> str:
    """The code of these engine modules (by path in the engine, e.g. "builder/notebook"): the key of what a
    build-side module keeps between builds, so that editing it renders afresh."""
    h = hashlib.sha256()
    for name in modules:
        h.update(name.encode() + (ENGINE / f"{name}.py").read_bytes())
    return h.hexdigest()


def kept(file: Path, version: str, make: Callable[[], bytes]) -> bytes:
    """make()'s bytes, kept in `file` under `version`: its first line holds the version and the
    bytes' seal, so a file of another version, cut short, damaged or not the engine's is made
    again and replaced. Raises OSError if the file cannot be written (callers name the cache:
    cache_errors)."""
    def head(body: bytes) -> bytes:
        return f"{version} {seal(file.parent, version.encode(), body)}".encode()

    try:
        first, body = file.read_bytes().split(b"\n", 1) if file.is_file() else (b"", b"")  # a pipe would hang
        if first == head(body):
            return body
    except (OSError, ValueError):  # absent, or no first line
        pass
    body = make()
    write_atomically(file, head(body) + b"\n" + body)
    return body


KEY = ".key"  # in each folder of the cache: the secret its files are sealed with


def seal(folder: Path, *parts: bytes) -> str:
    """The HMAC of `parts` under `folder`'s key, made if the folder has none (raises OSError if it
    cannot be). Each part is framed by its length: (b"ab", b"c") and (b"a", b"bc") differ."""
    mac = hmac.new(_key(folder), digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.hexdigest()


def sealed(folder: Path, claimed: object, *parts: bytes) -> bool:
    """Does `claimed` equal the seal of `parts` (compared in constant time)? False where the
    folder's key cannot be read or made."""
    try:
        return isinstance(claimed, str) and hmac.compare_digest(claimed, seal(folder, *parts))
    except OSError:
        return False


def _key(folder: Path) -> bytes:
    """The folder's key, made once: written aside, then linked into place, so that builds making
    it at once agree on one (a link never replaces a file) and none reads it half-written. Read
    each time, not remembered: a cache folder deleted meanwhile gets a new key, the same for all."""
    path = folder / KEY
    if not path.is_file():  # absent, or a pipe or a folder in its place (reading a pipe would hang)
        discard(path)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = temporary_beside(path)
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(secrets.token_bytes(32))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_bytes()


def discard(path: Path) -> None:
    """Remove whatever is at `path` (a file, a link, a pipe, a folder), if anything is."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def cache_errors(folder: Path) -> contextlib.AbstractContextManager[None]:
    """Writing the cache failed (a full disk, a read-only folder, a file where a folder should
    be): the cache's fault, not a lesson's. Raises one SetupError that says which and what to do."""
    return _CacheErrors(Path(folder))


class _CacheErrors(contextlib.AbstractContextManager):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: object) -> None:
        if isinstance(error, OSError):
            raise SetupError(cache_problem(self.folder, error)) from None


_ELSEWHERE = "or point cache_dir (mkdocs.yml) or LESSONLIB_CACHE_DIR at another folder"


def cache_problem(folder: Path, error: OSError) -> str:
    """The failed cache write, in one line: what is wrong with the folder and the fix."""
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return f"the cache folder {folder} cannot be made: {blocker} is a file; remove it {_ELSEWHERE}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the cache folder {folder} is on a full disk ({error.strerror}); free some space {_ELSEWHERE}"
    if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"the cache folder {folder} cannot be written ({error.strerror}); make it writable {_ELSEWHERE}"
    return f"the cache folder {folder} cannot be written ({error.strerror or error}); {_ELSEWHERE.removeprefix('or ')}"


def touch(path: Path) -> None:
    """Mark a stored entry as used now, for prune."""
    with contextlib.suppress(OSError):
        os.utime(path)


def file_lock(path: Path, wait: bool = True) -> FileLock | None:
    """An exclusive lock, held until it is released; None if another process holds it and
    `wait` is False. A flock, never a marker file: the kernel drops it when its process dies, so
    a killed build leaves no stale lock behind. The file stays (prune removes unheld ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, thread_local=False, fallback_to_soft=False, preserve_lock_file=True)
    try:
        lock.acquire(blocking=wait)
    except Timeout:
        return None
    return lock


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write aside, then rename: readers and concurrent builds only ever see whole files.
    The file gets the usual permissions (the umask's), not mkstemp's owner-only ones: files
    written into the site must be readable by the web server that serves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    try:
        with open(tmp, "xb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temporary_beside(path: Path) -> Path:
    """Where `path` is written before it is renamed into place, named by the writing process (and
    short enough for any name the file itself may have)."""
    return path.with_name(f".{path.name[:128]}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")

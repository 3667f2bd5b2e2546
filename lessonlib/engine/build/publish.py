"""Publish a site whole or not at all: MkDocs writes into a staging folder beside site_dir, and
only a build that succeeded swaps it in (one atomic rename exchange on Linux). A failed build
removes its staging folder; a killed one leaves it, and the next build removes it (a staging
folder is locked by the build writing it, and the kernel drops the lock when that build dies).
Readers, and builds side by side, only ever see a whole site.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lessonlib.engine.worker.errors import SetupError

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class Staging:
    """A locked staging folder for `site_dir`."""

    def __init__(self, site_dir: Path) -> None:
        self.site_dir = Path(site_dir).absolute()
        parent = self.site_dir.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            with _turn(self.site_dir):  # no other build takes this folder for abandoned meanwhile
                remove_abandoned(self.site_dir)
                self.path = Path(tempfile.mkdtemp(prefix=_prefix(self.site_dir), dir=parent))
                self.path.chmod(0o777 & ~_umask())  # the site's folder, readable as MkDocs' own would be
                self.lock = _lock(self.path, wait=True)
        except OSError as e:
            raise SetupError(f"cannot make a folder to build the site in beside {self.site_dir} "
                             f"({e.strerror or e}): site_dir's folder must be writable") from None

    def publish(self) -> None:
        """Swap the staged site in (keeping the old site's dot files, as MkDocs' cleaning does),
        then remove the old one."""
        with _turn(self.site_dir):
            if self.site_dir.is_dir():
                for entry in self.site_dir.iterdir():
                    if entry.name.startswith(".") and not (self.path / entry.name).exists():
                        entry.rename(self.path / entry.name)
            exchange(self.path, self.site_dir)
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self.lock.close()


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def exchange(staged: Path, site_dir: Path) -> None:
    """Put `staged` at `site_dir`, and what was there (if anything) at `staged`, in one step
    where the kernel can (renameat2 RENAME_EXCHANGE); else in two renames."""
    if site_dir.exists() and _rename_exchange(staged, site_dir):
        return
    if site_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=_prefix(site_dir), dir=site_dir.parent))
        site_dir.rename(old / "site")
        staged.rename(site_dir)
        old.rename(staged)
    else:
        staged.rename(site_dir)


def remove_abandoned(site_dir: Path) -> None:
    """Staging folders of builds that died (nobody holds their lock)."""
    for folder in site_dir.parent.glob(f"{_prefix(site_dir)}*"):
        lock = _lock(folder, wait=False)
        if lock is not None:
            shutil.rmtree(folder, ignore_errors=True)
            lock.close()


def _prefix(site_dir: Path) -> str:
    return f".{site_dir.name}.building-"


def _lock(folder: Path, wait: bool) -> _Handle | None:
    """A lock on the folder itself, held while the returned handle is open."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(handle)
        return None
    return _Handle(handle)


class _Handle:
    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _turn(site_dir: Path) -> _Handle:
    """Builds side by side take turns to start and to swap: a lock on site_dir's folder."""
    handle = _lock(site_dir.parent, wait=True)
    if handle is None:
        raise OSError(errno.EACCES, "cannot open", str(site_dir.parent))
    return handle


def _rename_exchange(a: Path, b: Path) -> bool:
    if sys.platform != "linux":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # a file system that cannot
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))

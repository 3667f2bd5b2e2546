"""Publish a site whole or not at all: MkDocs writes into a staging folder beside site_dir, and
only a build that succeeded swaps it in (one atomic rename exchange on Linux). A failed build
removes its staging folder; a killed one leaves it, and the next build removes it (a staging
folder's lock file, beside it, is held by the build writing it, and the kernel drops the lock
when that build dies).
Readers, and builds side by side, only ever see a whole site. Every file the build writes into
it stays inside it (in_site), whatever its name says.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lessonlib.engine.worker.errors import SetupError
from lessonlib.engine.worker.store import file_lock

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
                self.lock = file_lock(_lock_file(self.path))
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
        _lock_file(self.path).unlink(missing_ok=True)  # no build looks for it once its folder is gone
        self.lock.release()


def in_site(site: Path, name: str) -> Path:
    """The file `name` (a path in the site) of the site at `site`; ValueError for a name that
    leads out of it ('..', an absolute path, a link)."""
    folder = Path(site).resolve()
    path = (folder / name).resolve()
    if path == folder or not path.is_relative_to(folder):
        raise ValueError(f"{name!r} leads out of the site")
    return path


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
    """Staging folders of builds that died (nobody holds their lock), and their lock files."""
    for name in {p.name.removesuffix(".lock") for p in site_dir.parent.glob(f"{_prefix(site_dir)}*")}:
        folder = site_dir.parent / name
        if (lock := file_lock(_lock_file(folder), wait=False)) is not None:
            shutil.rmtree(folder, ignore_errors=True)
            _lock_file(folder).unlink(missing_ok=True)
            lock.release()


def _prefix(site_dir: Path) -> str:
    return f".{site_dir.name}.building-"


def _lock_file(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


@contextmanager
def _turn(site_dir: Path) -> Iterator[None]:
    """Builds side by side take turns to start and to swap: a lock beside site_dir."""
    lock = file_lock(site_dir.with_name(f".{site_dir.name}.lock"))
    try:
        yield
    finally:
        lock.release()


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

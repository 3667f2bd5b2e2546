"""Fingerprints of values and callables, for memo keys: everything that decides a call's result
besides the project's files (which the call's manifest covers).

A value is fingerprinted by its pickled bytes (joblib's hasher: NumPy arrays by content, dicts
and sets in a stable order). A function is fingerprinted by what it carries: its code (not its
line numbers), its defaults, its closure cells; a bound method by its function and its `self`;
a functools.partial by its function and its arguments. A function or class that cannot be
imported by name (one defined in a page, or inside another function) counts by content; one
that can (a project module's) by name, since its module's file is an input of the call.
"""
from __future__ import annotations

import functools
import hashlib
import pickle
import sys
import types
from collections.abc import Callable

from joblib.hashing import NumpyHasher


class Unfingerprintable(TypeError):
    """A value a memo key needs cannot be fingerprinted (an open file, a lock, a generator ...)."""


def value_fingerprint(value: object, _active: frozenset[int] = frozenset()) -> str:
    hasher = _Hasher(_active)
    try:
        return hasher.hash(value)
    except Unfingerprintable:
        raise
    except Exception as e:  # pickling fails in many ways: PicklingError, TypeError, AttributeError
        raise Unfingerprintable(f"{type(e).__name__}: {e}") from None


def callable_fingerprint(func: Callable, _active: frozenset[int] = frozenset()) -> str:
    """What the callable carries, as one hash. Raises Unfingerprintable, naming the part."""
    active = _active | {id(func)}
    parts: list[tuple[str, object]]
    if isinstance(func, functools.partial):
        parts = [("function", callable_fingerprint(func.func, active)), ("arguments", (func.args, func.keywords))]
    elif isinstance(func, types.MethodType):
        parts = [("function", callable_fingerprint(func.__func__, active)), ("bound self", func.__self__)]
    elif isinstance(func, types.FunctionType):
        cells = tuple(_cell(c) for c in func.__closure__ or ())
        parts = [("code", code_hash(func.__code__)), ("defaults", func.__defaults__),
                 ("keyword defaults", func.__kwdefaults__), ("closure", cells)]
    elif isinstance(func, type):
        parts = [("class", class_fingerprint(func, active))]
    elif isinstance(func, types.BuiltinFunctionType):
        owner = func.__self__
        parts = [("builtin", f"{func.__module__}.{func.__qualname__}"),
                 ("bound self", None if isinstance(owner, types.ModuleType) else owner)]
    else:  # an object with __call__
        parts = [("method", callable_fingerprint(type(func).__call__, active)), ("bound self", func)]
    digest = hashlib.sha256()
    for what, part in parts:
        try:
            digest.update(value_fingerprint(part, active).encode())
        except Unfingerprintable as e:
            raise Unfingerprintable(f"its {what} ({e})") from None
    return digest.hexdigest()


def class_fingerprint(cls: type, _active: frozenset[int] = frozenset()) -> str:
    """A class defined where it cannot be imported: its bases, methods and attributes."""
    members = {}
    for name, member in sorted(vars(cls).items()):
        if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"):
            continue
        if isinstance(member, (classmethod, staticmethod)):
            member = member.__func__
        if isinstance(member, property):
            member = (member.fget, member.fset, member.fdel)
        members[name] = member
    return value_fingerprint((cls.__qualname__, cls.__bases__, members), _active | {id(cls)})


def code_hash(code: types.CodeType) -> str:
    """A function's code without its file name or line numbers: moving it does not change it."""
    h = hashlib.sha256(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        h.update(code_hash(const).encode() if isinstance(const, types.CodeType) else repr(const).encode())
    return h.hexdigest()


def importable(obj: object) -> bool:
    """Found again by its module and qualified name (so its module stands for it); not a
    notebook's __main__, which has no file that could."""
    module = getattr(obj, "__module__", None) or ""
    target: object = sys.modules.get(module)
    if target is None or module == "__main__":
        return False
    for part in getattr(obj, "__qualname__", "<>").split("."):
        target = getattr(target, part, None)
    return target is obj


class _Empty:
    """An empty closure cell (a name the function refers to before it is assigned)."""


def _cell(cell: types.CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:
        return _Empty


class _Hasher(NumpyHasher):
    """joblib's hasher, with functions and classes that cannot be imported by name hashed by
    content (persistent_id runs before pickle would look them up by name and fail)."""

    def __init__(self, active: frozenset[int]) -> None:
        super().__init__()
        self.active = active

    def save(self, obj: object, save_persistent_id: bool = True) -> None:
        if save_persistent_id:
            super().save(obj)
        else:  # the persistent id itself, a string (joblib's save takes no such argument)
            pickle._Pickler.save(self, obj, save_persistent_id=False)

    def persistent_id(self, obj: object) -> str | None:
        if obj is _Empty:
            return "empty cell"
        if not isinstance(obj, (types.FunctionType, type)) or importable(obj):
            return None
        if id(obj) in self.active:  # a function that refers to itself, a class to its own methods
            return f"recursive {obj.__qualname__}"
        if isinstance(obj, type):
            return f"class {class_fingerprint(obj, self.active)}"
        return f"function {callable_fingerprint(obj, self.active)}"

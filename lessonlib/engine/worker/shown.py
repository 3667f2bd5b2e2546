"""The machinery in view: the code a page shows is the code that runs, with nothing in the way.

- ``source_of("module:object")``: a library object's code, for a ```python source="..."```
  block. It runs in the page's worker, so the module it imports is an input of the page like
  any other: editing the object re-renders the page.
- ``defined_at(namespace, names)``: where the functions a ``memo="..."`` option names are
  defined, for the site to link them.
- ``memoized(namespace, names)``: the callables a block names in ``memo="..."``, memoized while
  it runs (as ``memo(f)(...)`` would, under the same keys), so that its code calls them plainly.
  The names are replaced in the page's globals by views that memoize them, not in their modules:
  a library function that calls another one still calls it plainly, as under ``memo(f)(...)``.
  Exported notebooks wrap the block's code in it (lessonlib.memoized).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import textwrap
import types
from collections.abc import Iterator

from lessonlib.engine.worker.memo import memo
from lessonlib.engine.worker.outputs import Reference, Source


class NotFound(Exception):
    """A name that does not resolve: one line that says which part is missing (the page names
    the option it came from)."""


def source_of(target: str) -> Source:
    """The code of `target`, "package.module:Object.method", with its file and first line."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise NotFound(f"no module {e.name!r}") from None
    found = _attribute(module, name.split("."), module_name)
    try:
        lines, line = inspect.getsourcelines(found)
    except (TypeError, OSError) as e:
        raise NotFound(f"no source to show ({e})") from None
    home = inspect.getmodule(found) or module
    return Source(textwrap.dedent("".join(lines)), _file_of(home), max(line, 1))


def defined_at(namespace: dict, names: str) -> list[Reference]:
    """The file and first line of each function `names` names that has Python source; a name that
    does not resolve is left to memoized, which says what is wrong."""
    found = []
    for name in names.split():
        root, *parts = name.split(".")
        try:
            target = _attribute(namespace[root], parts, root)
            line = inspect.getsourcelines(target)[1]
        except (KeyError, NotFound, TypeError, OSError):
            continue
        module = inspect.getmodule(target)
        if module is not None:
            found.append(Reference(name.rpartition(".")[2], _file_of(module), max(line, 1)))
    return found


def _file_of(module: object) -> str:
    """The module's file as its dotted name places it: the same in every checkout."""
    name = module.__name__.replace(".", "/")  # type: ignore[attr-defined]
    return f"{name}/__init__.py" if hasattr(module, "__path__") else f"{name}.py"


def _attribute(value: object, path: list[str], where: str) -> object:
    for part in path:
        if not hasattr(value, part):
            raise NotFound(f"{where} has no attribute {part!r}")
        value, where = getattr(value, part), f"{where}.{part}"
    return value


@contextlib.contextmanager
def memoized(namespace: dict, names: str) -> Iterator[None]:
    """Within, each of `names` ("memory_task.sweep train": a page's name, or a dotted name through
    modules, resolved in `namespace`) is memoized; after, the globals are as they were (but for a
    name the code bound anew)."""
    tree: dict = {}  # root name -> {attribute -> ... -> None (memoized)}
    for name in names.split():
        parts = name.split(".")
        if parts[0] not in namespace:
            raise NotFound(f"no name {parts[0]!r} in the page when this block starts")
        if not callable(_attribute(namespace[parts[0]], parts[1:], parts[0])):
            raise NotFound(f"{name} is not a function or class, so it cannot be memoized")
        node = tree
        for n, part in enumerate(parts[:-1], start=1):
            owner = _attribute(namespace[parts[0]], parts[1:n], parts[0])
            if not isinstance(owner, types.ModuleType) or node.get(part, {}) is None:
                raise NotFound(f"{'.'.join(parts[:n])} is not a module (or is memoized itself): "
                               "memoize a function, a class, or one of a module's")
            node = node.setdefault(part, {})
        node[parts[-1]] = None
    originals = {root: namespace[root] for root in tree}
    views = {root: _view(namespace[root], sub) for root, sub in tree.items()}
    namespace.update(views)
    try:
        yield
    finally:
        for root, view in views.items():
            if namespace.get(root) is view:
                namespace[root] = originals[root]


def _view(value: object, tree: dict | None) -> object:
    """`value` memoized (a leaf), or a module seen through with the attributes `tree` names memoized."""
    if tree is None:
        return memo(value)
    return _Through(value, {name: _view(getattr(value, name), sub) for name, sub in tree.items()})


class _Through(types.ModuleType):
    """A module's attributes, but for those replaced. A module still (the memo's tracing passes
    modules by: they are inputs by their files, not their values)."""

    def __init__(self, base: types.ModuleType, replaced: dict[str, object]) -> None:
        super().__init__(base.__name__, base.__doc__)
        vars(self).update(replaced, _Through__base=base)

    def __getattr__(self, name: str) -> object:  # only for what is not replaced
        return getattr(self.__base, name)

    def __repr__(self) -> str:
        return repr(self.__base)

"""The machinery in view: the code a page shows is the code that runs, with nothing in the way.

- ``source_of("module:object")``: a library object's code, for a ```python source="..."```
  block. It runs in the page's worker, so the module it imports is an input of the page like
  any other: editing the object re-renders the page.
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
from collections.abc import Iterator

from lessonlib.engine.outputs import Source


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
    """Within, each of `names` ("memory_task.sweep train": dotted, resolved in `namespace`) is
    memoized; after, the globals are as they were (but for a name the code bound anew)."""
    from lessonlib.engine.memo import memo  # NumPy and joblib: only a page that memoizes needs them

    tree: dict = {}  # root name -> {attribute -> ... -> None (memoized)}
    for name in names.split():
        root, *path = name.split(".")
        if root not in namespace:
            raise NotFound(f"no name {root!r} in the page when this block starts")
        if not callable(_attribute(namespace[root], path, root)):
            raise NotFound(f"{name} is not a function or class, so it cannot be memoized")
        node = tree
        for part in [root, *path][:-1]:
            node = node.setdefault(part, {})
        node[name.rpartition(".")[2]] = None
    originals = {root: namespace[root] for root in tree}
    views = {root: _view(namespace[root], sub, memo) for root, sub in tree.items()}
    namespace.update(views)
    try:
        yield
    finally:
        for root, view in views.items():
            if namespace.get(root) is view:
                namespace[root] = originals[root]


def _view(value: object, tree: dict | None, memo) -> object:
    """`value` memoized (a leaf), or seen through with the attributes `tree` names memoized."""
    if tree is None:
        return memo(value)
    return _Through(value, {name: _view(getattr(value, name), sub, memo) for name, sub in tree.items()})


class _Through:
    """An object's attributes, but for those replaced (a module's memoized functions)."""

    def __init__(self, base: object, replaced: dict[str, object]) -> None:
        self.__dict__.update(replaced)
        self.__dict__["_Through__base"] = base

    def __getattr__(self, name: str) -> object:  # only for what is not replaced
        return getattr(self.__base, name)

    def __repr__(self) -> str:
        return repr(self.__base)

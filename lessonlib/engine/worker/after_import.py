"""Set a library up as a page imports it: a page that never imports torch or matplotlib never
pays for their import, however many pages of the site use them."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass


def when_imported(name: str, start: Callable[[types.ModuleType], object]) -> _AfterImport | None:
    """start(module) now if the top-level module `name` is loaded, else right after its first
    import (the start pending, returned: `cancel` drops it); never if it is not installed. Starts
    pending for the same module run in the order they were asked for."""
    if sys.modules.get(name) is not None:
        start(sys.modules[name])
    elif importlib.util.find_spec(name) is not None:  # None also where sys.modules holds None: import fails
        pending = _AfterImport(name, start)
        sys.meta_path.insert(0, pending)
        return pending
    return None


def cancel(pending: _AfterImport | None) -> None:
    """Drop a start that is still pending: its module was not imported meanwhile."""
    if pending is not None and pending in sys.meta_path:
        sys.meta_path.remove(pending)


@dataclass(eq=False)  # each pending start is itself (cancel finds it by identity)
class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds `name` as the finders after it would, and runs `start` once the module has loaded.
    Only a real import starts it: a spec looked up and not loaded (find_spec) leaves it pending."""

    name: str
    start: Callable[[types.ModuleType], object]

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self not in sys.meta_path:
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:  # a start pending after this one wraps first
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            load(module)
            cancel(self)
            self.start(module)

        spec.loader.exec_module = exec_module  # this spec's own loader
        return spec

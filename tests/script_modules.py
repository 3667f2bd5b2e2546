"""The scripts in scripts/ (files without .py) loaded as modules, for their tests."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # where the scripts find page_runs


def load(name: str) -> types.ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(SCRIPTS / name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module  # its dataclasses look their module up there
    loader.exec_module(module)
    return module

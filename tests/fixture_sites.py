"""Fixture sites for the engine tests that need a real build or CLI run: a small mkdocs.yml,
a page that runs, and subprocess helpers that never inherit the build's own switches."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lessonlib.engine.config import CACHE_DIR, EXECUTE, REFRESH, WORKERS

MKDOCS_YML = """\
site_name: Fixture
strict: true
theme: {name: material, font: false}
plugins:
  - search
  - lessonlib:
      timeout: 60
      cache_dir: .cache
markdown_extensions: [admonition, pymdownx.superfences, attr_list]
"""
GOOD = """\
# Good

```python exec alt="A line that rises from 0 to 1."
import matplotlib.pyplot as plt
plt.plot([0, 1])
print("hello from the good page")
value = 6 * 7
```

The value is `{py} value`.
"""


def make_site(tmp_path: Path, pages: dict[str, str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "mkdocs.yml").write_text(MKDOCS_YML)
    for name, text in pages.items():
        (tmp_path / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / name).write_text(text)
    return tmp_path


# The build's own switches: a test sets those it means, never inherits them (a global cache
# folder would let one fixture build read another's results).
SWITCHES = (CACHE_DIR, WORKERS, REFRESH, EXECUTE)


def environment(**variables: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in SWITCHES}, "NO_MKDOCS_2_WARNING": "1", **variables}


def command(args: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess:
    env = environment(**variables)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def build(site: Path) -> subprocess.CompletedProcess:
    return command([sys.executable, "-m", "mkdocs", "build", "--strict"], site)


def lessonlib_cli(site: Path, *args: str) -> subprocess.CompletedProcess:
    return command([sys.executable, "-m", "lessonlib", *args], site)

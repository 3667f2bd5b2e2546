"""Fixture sites for the engine tests that build one or run the CLI: a small mkdocs.yml, a page
that runs, and two ways to run each door. In this process (build_here, cli_here; conftest offers
them as the fixtures `build` and `lessonlib_cli`): what a test needs unless it is about the
process itself. In a subprocess (build_process, cli_process, command): one run per door, and
what only a process shows; each caller says which. Neither inherits the build's own switches."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from lessonlib.engine.config import CACHE_DIR, EXECUTE, REFRESH, SCHEDULER, WORKERS

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
SWITCHES = (CACHE_DIR, WORKERS, REFRESH, EXECUTE, SCHEDULER)


def environment(**variables: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in SWITCHES}, "NO_MKDOCS_2_WARNING": "1", **variables}


# --- in this process -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """What a build or a CLI run said, where its process would have said it (the fields of
    subprocess.CompletedProcess that the tests read)."""

    returncode: int
    stdout: str
    stderr: str


def build_here(site: Path, **variables: str) -> Run:
    """`mkdocs build --strict`, as MkDocs' build command runs it: its log, lessonlib's included,
    is the stderr; an abort (a strict warning, a plugin's error) is status 1 with its message on
    stdout, as click prints it."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    log = io.StringIO()
    with _as_a_command(site, variables), _mkdocs_log(log):
        try:
            config = load_config(str(site / "mkdocs.yml"), strict=True)
            config.plugins.on_startup(command="build", dirty=False)
            try:
                build(config)
            finally:
                config.plugins.on_shutdown()
        except MkDocsException as e:
            return Run(e.exit_code, f"\n{e.format_message()}\n", log.getvalue())
    return Run(0, "", log.getvalue())


def cli_here(site: Path, *args: str, **variables: str) -> Run:
    """`python -m lessonlib ARGS` in the folder `site`."""
    from lessonlib.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with _as_a_command(site, variables), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return Run(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _as_a_command(cwd: Path, variables: dict[str, str]) -> Iterator[None]:
    """In `cwd`, with the environment `command` gives a subprocess; both restored after."""
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, environment(**variables), clear=True):
        yield


@contextlib.contextmanager
def _mkdocs_log(stream: io.StringIO) -> Iterator[None]:
    """MkDocs' log from INFO up into `stream`, as `mkdocs build` prints it uncoloured."""
    logger = logging.getLogger("mkdocs")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)-8s-  %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- in a subprocess -----------------------------------------------------------------------------

def command(args: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess:
    env = environment(**variables)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


MKDOCS_BUILD = [sys.executable, "-m", "mkdocs", "build", "--strict"]
LESSONLIB = [sys.executable, "-m", "lessonlib"]


def build_process(site: Path, **variables: str) -> subprocess.CompletedProcess:
    return command(MKDOCS_BUILD, site, **variables)


def cli_process(site: Path, *args: str, **variables: str) -> subprocess.CompletedProcess:
    return command([*LESSONLIB, *args], site, **variables)

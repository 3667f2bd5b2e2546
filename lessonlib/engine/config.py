"""Every setting of the engine, in one place: the options of the lessonlib plugin in mkdocs.yml,
the LESSONLIB_* environment variables, the Settings the three doors (the MkDocs plugin, the
pytest collector, the CLI) hand the executor, and the seed. No other module reads a LESSONLIB_*
variable: they ask Settings (or, outside a build, `Settings().with_environment()`).

The cache lives where a user's caches live (platformdirs: $XDG_CACHE_HOME/lessonlib, else
~/.cache/lessonlib on Linux), so every clone and worktree on a machine shares it: its keys name
paths relative to the project's root, never the checkout's folder.

MkDocs is imported only when the plugin's option schema or mkdocs.yml is asked for: a page's
process and a reader's notebook import this module without it.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import platformdirs

from lessonlib.engine.worker import options
from lessonlib.engine.worker.errors import SetupError

SEED = 0  # every page, and every memoized call, starts from this seed in random, NumPy and torch

# The environment variables the engine reads (here, and nowhere else).
EXECUTE = "LESSONLIB_EXECUTE"  # 0: show the code and run nothing (a quick preview of the prose)
REFRESH = "LESSONLIB_REFRESH"  # 1: run every page and memoized call again, even on a cache hit
CACHE_DIR = "LESSONLIB_CACHE_DIR"  # the cache folder instead of cache_dir; outside a build, memo's store
WORKERS = "LESSONLIB_WORKERS"  # overrides the workers option
DEVICE = "LESSONLIB_DEVICE"  # the torch device pages run on: cpu (the default), cuda, cuda:1
_DEVICE_NAME = re.compile(r"cpu|(?:cuda|mps|xpu)(?::\d+)?")
PERTURB = "LESSONLIB_PERTURB"  # scripts/robustness: stand-ins for another machine (scripts/perturb)
_PERTURBATION = re.compile(r"subnormals|threads=[1-9]\d*")
BUILD_PID = "LESSONLIB_BUILD_PID"  # set by the build for its forkserver, which ends when the build does
SCHEDULER = "LESSONLIB_SCHEDULER"  # overrides the scheduler option: run pages on that Dask cluster
# What Dask's Client connects to: PROTOCOL://HOST:PORT (or HOST:PORT, tcp), an IPv6 host in brackets.
_ADDRESS = re.compile(r"(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+):\d{1,5}|inproc://\S+")
_EXTRA = re.compile(r"[A-Za-z0-9](?:[-_.A-Za-z0-9]*[A-Za-z0-9])?")  # a package's extra, as pip names it
VARIABLES = (EXECUTE, REFRESH, CACHE_DIR, WORKERS, DEVICE, PERTURB, BUILD_PID, SCHEDULER)
# Read by the build only, never in a page's process (which reads its settings for lessonlib.device()):
# it would record them as inputs, and a cluster build would run again what a local build cached.
BUILD_ONLY = (SCHEDULER,)


def user_cache_dir() -> Path:
    """The cache's default folder: the user's, shared by every clone of the project."""
    return Path(platformdirs.user_cache_dir("lessonlib", appauthor=False))


@dataclass(frozen=True)
class Settings:
    """What the executor is told; made from mkdocs.yml and the environment (load_settings)."""

    root: Path = field(default_factory=Path.cwd)  # the project: the folder of mkdocs.yml
    timeout: float = 600.0  # seconds per block, unless the block says otherwise
    cache_dir: Path | None = None  # None: neither read nor write a cache
    execute: bool = True  # False: show the code, run nothing (LESSONLIB_EXECUTE=0)
    refresh: bool = False  # run even on a cache hit, memoized experiments too (LESSONLIB_REFRESH=1)
    workers: int = 0  # pages at once, and processes a page's experiments start; 0: one per core (LESSONLIB_WORKERS)
    memory_limit_mb: float | None = None  # per page, its child processes included; None: no limit
    output_limit_kb: float = 1024  # per block, text and figures
    cache_limit_mb: float = 1024  # page entries and memoized results; the least recently used go first
    keep_going: bool = False  # run a page on past a failed assert, then fail it naming every failed assert
    publish_limit_mb: float = 10  # per page: the files it publishes beside itself (lessonlib.publish)
    device: str = "cpu"  # the torch device pages run on (LESSONLIB_DEVICE): cpu, cuda, cuda:1
    perturb: tuple[str, ...] = ()  # scripts/robustness only (LESSONLIB_PERTURB): subnormals, threads=N
    scheduler: str | None = None  # a Dask scheduler (tcp://host:8786) to run pages on; None: this machine's cores
    preload: tuple[str, ...] | None = None  # modules the pages' template imports; None: those pages imported before
    publish_extras: tuple[str, ...] = ()  # the extras of the site's wheel its notebooks install (publish_package)
    checked_pages: tuple[str, ...] = ()  # glob patterns (lessons/*) of the pages held to the house rules (pytest)

    def __post_init__(self) -> None:
        """Raises SetupError, naming the option, for a value out of range."""
        # Pages run in their own folders: every path the engine hands to a worker is absolute.
        object.__setattr__(self, "root", Path(self.root).resolve())
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", Path(self.cache_dir).resolve())
            _own_folder("cache_dir", self.cache_dir, self.root)
        checked = {
            "timeout": options.positive("timeout", self.timeout, "seconds"),
            "workers": options.whole_number("workers", self.workers),
            "output_limit_kb": options.positive("output_limit_kb", self.output_limit_kb, "KB"),
            "cache_limit_mb": options.at_least_zero("cache_limit_mb", self.cache_limit_mb, "MB"),
            "publish_limit_mb": options.positive("publish_limit_mb", self.publish_limit_mb, "MB"),
        }
        if self.memory_limit_mb is not None:
            checked["memory_limit_mb"] = options.positive("memory_limit_mb", self.memory_limit_mb, "MB")
        if not _DEVICE_NAME.fullmatch(self.device):  # at the start, whether or not a page asks for it
            raise SetupError(f"{DEVICE}: {self.device!r} is not a torch device: cpu, cuda, cuda:N, mps or xpu")
        for perturbation in self.perturb:
            if not _PERTURBATION.fullmatch(perturbation):
                raise SetupError(f"{PERTURB}: {perturbation!r} is not a perturbation: subnormals or threads=N "
                                 "(N of 1 or more), comma-separated")
        if self.scheduler is not None:
            scheduler_address("scheduler", self.scheduler)
        if self.preload is not None:
            checked["preload"] = tuple(module_name("preload", name) for name in self.preload)
        for extra in self.publish_extras:
            if not isinstance(extra, str) or not _EXTRA.fullmatch(extra):
                raise SetupError(f"publish_extras: {extra!r} is not the name of a package's extra (course, test ...)")
        checked["publish_extras"] = tuple(self.publish_extras)
        checked["checked_pages"] = page_patterns("checked_pages", self.checked_pages)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def with_environment(self) -> Settings:
        """Apply the LESSONLIB_* variables (a bad value is a SetupError naming the variable; a
        blank one is unset)."""
        env = {name: os.environ.get(name, "").strip() for name in VARIABLES if name not in BUILD_ONLY}
        switches = {name: options.switch(name, env[name]) for name in (EXECUTE, REFRESH) if env[name]}
        cache_dir = Path(env[CACHE_DIR]).expanduser().resolve() if env[CACHE_DIR] else None
        if cache_dir is not None:
            _own_folder(CACHE_DIR, cache_dir, self.root)
        return replace(
            self,
            cache_dir=cache_dir or self.cache_dir,
            execute=self.execute and switches.get(EXECUTE, True),
            refresh=self.refresh or switches.get(REFRESH, False),
            workers=options.whole_number(WORKERS, env[WORKERS]) if env[WORKERS] else self.workers,
            device=env[DEVICE] or self.device,
            perturb=tuple(p.strip() for p in env[PERTURB].split(",") if p.strip()) or self.perturb,
        )

    def with_build_environment(self) -> Settings:
        """with_environment, and the variables only a build reads (BUILD_ONLY): for the doors, at
        the build's start. Also refused there: a LESSONLIB_* variable that is not one of the
        engine's (misspelt, it would be ignored), and a device this machine lacks (unless pages
        run on a cluster, whose workers have devices of their own)."""
        unknown = sorted(name for name in os.environ if name.startswith("LESSONLIB_") and name not in VARIABLES)
        if unknown:
            raise SetupError(f"{unknown[0]}: {os.environ[unknown[0]]!r} is set, but lessonlib has no such variable "
                             f"(misspelt? its variables are {', '.join(v for v in VARIABLES if v != BUILD_PID)})")
        scheduler = os.environ.get(SCHEDULER, "").strip()
        settings = replace(self.with_environment(),
                           scheduler=scheduler_address(SCHEDULER, scheduler) if scheduler else self.scheduler)
        if not settings.scheduler:
            _device_here(settings.device)
        return settings


def scheduler_address(source: str, address: str) -> str:
    """The address, if Dask's Client could connect to it; else a SetupError naming `source`."""
    if not _ADDRESS.fullmatch(address):
        raise SetupError(f"{source}: {address!r} is not a Dask scheduler's address (tcp://HOST:PORT)")
    return address


def module_name(source: str, name: object) -> str:
    """The name, if it is a module's (dotted identifiers); else a SetupError naming `source`."""
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
        raise SetupError(f"{source}: {name!r} is not a module's name (numpy, matplotlib.pyplot ...)")
    return name


def page_patterns(source: str, patterns: object) -> tuple[str, ...]:
    """The glob patterns, if they are a list of them (strings, not empty); else a SetupError naming `source`."""
    if not isinstance(patterns, (list, tuple)):
        raise SetupError(f"{source}: {patterns!r} is not a list of glob patterns of pages (like [lessons/*, index.md])")
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise SetupError(f"{source}: {pattern!r} is not a glob pattern of pages, relative to docs/ (lessons/*, "
                             "index.md ...)")
    return tuple(patterns)


def _own_folder(source: str, cache_dir: Path, root: Path) -> None:
    """A SetupError if the cache folder is the project's or holds it: the cache is the build's
    alone (it prunes it; `lessonlib cache --clear` deletes it whole)."""
    if cache_dir == root or cache_dir in root.parents:
        raise SetupError(f"{source}: {str(cache_dir)!r} holds the project {root}: the cache needs a folder of its own "
                         "(the default, the user's cache folder, is shared by every clone)")


def _device_here(name: str) -> None:
    """A SetupError if torch sees no such device here (torch is imported only for one other than cpu)."""
    if name == "cpu":
        return
    import torch

    device = torch.device(name)
    count = getattr(torch, device.type).device_count()  # torch.cuda, torch.mps, torch.xpu
    if (device.index or 0) >= count:
        raise SetupError(f"{DEVICE}: {name!r}, but torch sees no such device on this machine "
                         f"({count} {device.type} device{'s' if count != 1 else ''})")


def environment_settings() -> Settings:
    """The settings outside a build (a notebook, a test, an experiment's process): the defaults
    and the LESSONLIB_* variables; no cache unless LESSONLIB_CACHE_DIR names one."""
    return Settings().with_environment()


def build_pid() -> str | None:
    """The build that started this forkserver (LESSONLIB_BUILD_PID), if one did."""
    return os.environ.get(BUILD_PID)


def pages_temp_prefix(build: int | str) -> str:
    """How the name of a build's folder for its pages' temporary files starts, in tempfile's
    folder: the forkserver removes the folders of a build that was killed (lessonlib.engine.guard)."""
    return f"lessonlib-pages-{build}-"


@functools.cache
def _lesson_config() -> type:
    from mkdocs.config import base
    from mkdocs.config import config_options as c

    class LessonConfig(base.Config):
        """The lessonlib plugin's options in mkdocs.yml (`plugins: - lessonlib: {...}`)."""

        timeout = c.Type((int, float), default=600)
        """Seconds a block may run; a block may set its own (`timeout=N` on its fence)."""
        cache_dir = c.Optional(c.Type(str))
        """The cache folder, relative to mkdocs.yml; unset: the user's cache folder, shared by
        every clone ($XDG_CACHE_HOME/lessonlib, else ~/.cache/lessonlib on Linux; the platform's
        user cache folder elsewhere). LESSONLIB_CACHE_DIR overrides it."""
        workers = c.Type(int, default=0)
        """Pages run at once, and processes a page's experiments may start; 0: one per core
        (LESSONLIB_WORKERS overrides it)."""
        memory_limit_mb = c.Optional(c.Type((int, float)))
        """Memory a page may use, its child processes included; unset: no limit."""
        output_limit_kb = c.Type((int, float), default=1024)
        """What one block may print and draw, text and figures together."""
        cache_limit_mb = c.Type((int, float), default=1024)
        """The size of the page entries and memoized results; past it, the least recently used go
        first (notebooks, parsed pages and the HTML memo are not counted)."""
        publish_limit_mb = c.Type((int, float), default=10)
        """What one page may publish beside itself with lessonlib.publish (model weights ...),
        its files together; they are kept in its cache entry too."""
        source_pages = c.ListOfItems(c.Type(str), default=[])
        """Packages and modules (dotted names) whose code the site shows, a page per module,
        each source block's label linking to its lines; empty: none."""
        publish_package = c.Type(bool, default=False)
        """Publish the site's own project (its pyproject.toml beside mkdocs.yml) as a wheel, with
        its constraints.txt, under downloads/, and start every notebook the site offers with a
        cell that installs them; off: notebooks are offered as they are, without an install cell."""
        publish_extras = c.ListOfItems(c.Type(str), default=[])
        """The extras of the site's project (its pyproject.toml's optional-dependencies) that
        the notebooks' install cell installs with it (publish_package); empty: none."""
        preload = c.Optional(c.ListOfItems(c.Type(str)))
        """Modules (numpy, matplotlib.pyplot ...) imported once, in the process every page's
        process starts from, so that no page imports them itself; unset: those the site's pages
        imported when they last ran (kept in the cache), the ones installed."""
        scheduler = c.Optional(c.Type(str))
        """A Dask scheduler's address (tcp://host:8786): pages run on its workers, which see
        the project and the cache folder at the same paths; unset: on this machine
        (LESSONLIB_SCHEDULER overrides it)."""
        checked_pages = c.Type(object, default=[])  # any value: Settings checks it, in the line every door prints
        """Pages held to the house rules, as glob patterns relative to the docs folder
        (`[lessons/*]`): under pytest, each such page that runs code gets two more tests, that
        every number in its prose comes from code the reader can see (no numeral typed by hand,
        no value a hidden block computed) and that every claim-like sentence is quoted by the
        check that backs it (`python -m lessonlib check` lists both); empty: no page."""

    return LessonConfig


def __getattr__(name: str) -> type:
    if name == "LessonConfig":  # MkDocs' option schema, made when the plugin first asks for it
        return _lesson_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def settings_from(config, root: Path, config_name: str = "mkdocs.yml") -> Settings:
    """The Settings for a validated LessonConfig and the environment. Raises SetupError, naming
    the option or the variable, for a bad value or an option lessonlib does not have."""
    unknown = sorted(set(config) - set(type(config)()))  # MkDocs only warns of them; the CLI would ignore them
    if unknown:
        raise SetupError(f"{config_name}, lessonlib option {unknown[0]}: {config[unknown[0]]!r}: lessonlib has no "
                         f"such option (misspelt? its options are {', '.join(type(config)())})")
    try:
        cache_dir = root / Path(config.cache_dir).expanduser() if config.cache_dir else user_cache_dir()
        settings = Settings(root=root, timeout=config.timeout, cache_dir=cache_dir,
                            workers=config.workers, memory_limit_mb=config.memory_limit_mb,
                            output_limit_kb=config.output_limit_kb, cache_limit_mb=config.cache_limit_mb,
                            publish_limit_mb=config.publish_limit_mb, scheduler=config.scheduler,
                            preload=None if config.preload is None else tuple(config.preload),
                            publish_extras=tuple(config.publish_extras), checked_pages=config.checked_pages)
    except SetupError as e:
        raise SetupError(f"{config_name}, lessonlib option {e}") from None
    return settings.with_build_environment()


def load_settings(config_file: Path) -> Settings:
    """The build's settings, read from mkdocs.yml, for the CLI and the pytest collector."""
    from mkdocs.config import load_config

    config = load_config(str(config_file))
    return settings_from(config.plugins["lessonlib"].config, config_file.parent, config_file.name)

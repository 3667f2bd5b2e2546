"""A site's own project as a wheel, for the notebooks a reader downloads: a site with the
publish_package option (this course's) publishes it, with its pinned versions (constraints.txt),
under downloads/, and each notebook's first cell installs both from there
(lessonlib.engine.builder.notebook.install_cell). The project is the one whose pyproject.toml is
beside the site's mkdocs.yml; a site without the option reads none.

Written here from pyproject.toml rather than by a build backend: a pure-Python wheel is a zip
of the package's files and three metadata files, and building it this way needs nothing
downloaded (pip's build isolation would fetch setuptools), writes nothing into the checkout
(setuptools leaves build/ and an egg-info, which `mkdocs serve` would see as edits), takes a
fraction of a second, and gives the same bytes for the same sources.
"""
from __future__ import annotations

import base64
import hashlib
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from lessonlib.engine.worker.errors import SetupError
from lessonlib.engine.worker.store import cache_errors, kept

SOURCE = Path(__file__).resolve().parents[3]  # the checkout this lessonlib runs from (this course's project)
DOWNLOADS = "downloads"  # the site's folder for the wheel and the constraints
CONSTRAINTS = "constraints.txt"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every entry's time: the same sources give the same wheel


@dataclass(frozen=True)
class Project:
    """What pyproject.toml says about the package, and the package's files as they were read."""
    root: Path
    name: str
    version: str  # pyproject's, with a local label from the files: "0.1.0+<12 hex digits>"
    summary: str
    requires_python: str
    dependencies: tuple[str, ...]
    extras: dict[str, tuple[str, ...]]
    entry_points: dict[str, dict[str, str]]
    package_data: dict[str, tuple[str, ...]]  # package -> glob patterns in its folder
    sources: dict[str, bytes]  # path in the wheel -> contents: the modules and the package data

    @property
    def package(self) -> str:
        """The name as a package folder and in the wheel's file names: my-course is my_course."""
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def wheel_name(self) -> str:
        return f"{self.package}-{self.version}-py3-none-any.whl"


def read_project(root: Path = SOURCE) -> Project:
    """The project as it is now. Its version carries a label computed from pyproject.toml and
    every file of the package: pip keeps an installed version rather than reinstall the same
    one, so a reader's notebook would otherwise go on running the lessonlib of an older site.

    Raises SetupError, in one line, when pyproject.toml or a file of the package cannot be read
    (publish_package needs the project's pyproject.toml beside mkdocs.yml, and its package there)."""
    try:
        pyproject = (root / "pyproject.toml").read_bytes()
        data = tomllib.loads(pyproject.decode("utf-8"))
        project = data["project"]
        package_data = data.get("tool", {}).get("setuptools", {}).get("package-data", {})
        package_data = {k: tuple(v) for k, v in package_data.items()}
        found = Project(root, project["name"], project["version"], project.get("description", ""),
                        project.get("requires-python", ""), tuple(project.get("dependencies", ())),
                        {k: tuple(v) for k, v in project.get("optional-dependencies", {}).items()},
                        project.get("entry-points", {}), package_data, {})
        if not (root / found.package / "__init__.py").is_file():
            raise SetupError(f"{root / 'pyproject.toml'}: the project {found.name} has no package {found.package}/ "
                             "beside it (a folder with an __init__.py): its wheel would hold no code")
        sources = {path.relative_to(root).as_posix(): path.read_bytes()
                   for path in _package_files(root / found.package, package_data)}
        label = hashlib.sha256(repr([pyproject, sorted(sources.items())]).encode()).hexdigest()[:12]
        return replace(found, version=f"{found.version}+{label}", sources=sources)
    except (OSError, ValueError, KeyError) as e:
        what = "cannot read the project's name, version, dependencies and files"
        raise SetupError(f"{root / 'pyproject.toml'}: {what} ({e})") from None


def wheel_bytes(project: Project, store: Path | None = None) -> bytes:
    """The wheel: every module of the package and its subpackages, the package data, and the
    metadata (dependencies unpinned, as in pyproject.toml; constraints.txt pins them). With a
    `store` folder, the wheel made last time is reused while every file in it is the same:
    compressing the package data was most of what publishing the wheel cost a warm build."""
    files = _wheel_files(project)
    if store is None:
        return _zipped(files)
    version = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()
    with cache_errors(store):  # one name: the version says whose it is
        return kept(store / f"{project.package}.whl", version, lambda: _zipped(files))


def _wheel_files(project: Project) -> dict[str, bytes]:
    dist_info = f"{project.package}-{project.version}.dist-info"
    files = dict(project.sources)
    files[f"{dist_info}/METADATA"] = _metadata(project).encode()
    files[f"{dist_info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: lessonlib\nRoot-Is-Purelib: true\n"
                                   b"Tag: py3-none-any\n")
    if project.entry_points:
        files[f"{dist_info}/entry_points.txt"] = "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items()) + "\n"
            for group, points in project.entry_points.items()).encode()
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    return files


def _zipped(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return out.getvalue()


def _package_files(top: Path, package_data: dict[str, tuple[str, ...]]) -> list[Path]:
    """As setuptools finds them: packages are folders with an __init__.py inside a package (the
    top one, `top`, named after the project), with their modules and the package data's patterns."""
    packages = sorted(p.parent for p in top.rglob("__init__.py") if _in_packages(p.parent, top))
    found = set()
    for package in packages:
        found.update(package.glob("*.py"))
        dotted = package.relative_to(top.parent).as_posix().replace("/", ".")
        for pattern in package_data.get(dotted, ()):
            found.update(p for p in package.glob(pattern) if p.is_file())
    return sorted(found)


def _in_packages(folder: Path, top: Path) -> bool:
    """Every folder from `top` down to `folder` is a package (a module folder elsewhere is not)."""
    return all((d / "__init__.py").is_file() for d in [folder, *folder.parents] if d == top or top in d.parents)


def _metadata(project: Project) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project.name}", f"Version: {project.version}",
             f"Summary: {project.summary}"]
    if project.requires_python:
        lines.append(f"Requires-Python: {project.requires_python}")
    lines += [f"Requires-Dist: {requirement}" for requirement in project.dependencies]
    for extra, requirements in project.extras.items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {requirement}; extra == "{extra}"' for requirement in requirements]
    return "\n".join(lines) + "\n"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

"""The MkDocs door: a thin plugin over execute_pages.

Every executable page runs in ``on_pre_build``. The pages are then rendered from those results;
what they render the same way every time (highlighted code, MathML, search entries) comes from
an HtmlMemo. MkDocs writes the site into a staging folder, swapped into site_dir only when the
whole build succeeded, strict checks included (lessonlib.engine.builder.publish): a failed or killed
build leaves the previous site as it was, under ``mkdocs serve`` too. Helper modules and data
files beside the pages are not published unless a page links them. Under ``mkdocs serve``,
what the pages read (helpers, data files, lessonlib's modules) is watched too, so editing any
of it rebuilds; a rebuild that only the last build's own writes asked for (a page that writes
its own input, through a process the engine saw only after the fact) stops before any page
runs, in one line, until a file changes again. With the publish_package option, the site
publishes its own project's wheel and pinned versions under downloads/, where every notebook it
offers (a lesson's, an exercise) installs them from, at site_url; without it (the default), no
notebook gets an install cell and nothing is read from a pyproject.toml. Every site gets the
engine's assets (lessonlib/engine/assets/): the stylesheets for what the engine writes (figures,
stamps, downloads, explorations) and the scripts that drive it, each before the site's own.
"""
from __future__ import annotations

import logging
import os
import posixpath
import stat
from pathlib import Path
from urllib.parse import urljoin

from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, event_priority, get_plugin_logger
from mkdocs.structure.files import File, InclusionLevel, get_files

from lessonlib.engine.builder import source_pages
from lessonlib.engine.builder.docs_files import linked, unpublished
from lessonlib.engine.builder.html_memo import HtmlMemo, MemoHighlightExtension
from lessonlib.engine.builder.mathml import leftover_tex, source_line, to_mathml
from lessonlib.engine.builder.notebook import Install, colab_url, notebook_text, published_exercise
from lessonlib.engine.builder.page import PageResult, execute_page, execute_pages
from lessonlib.engine.builder.publish import Staging, in_site
from lessonlib.engine.builder.render import checks_out_of_search, figure_files, fill_html_slots
from lessonlib.engine.builder.search_memo import memoize_search
from lessonlib.engine.builder.stylesheets import FOLDER, shared_stylesheets
from lessonlib.engine.builder.templates import cache_compiled_templates
from lessonlib.engine.builder.wheel import CONSTRAINTS, DOWNLOADS, read_project, wheel_bytes
from lessonlib.engine.config import LessonConfig, settings_from
from lessonlib.engine.worker.blocks import read_page
from lessonlib.engine.worker.errors import LessonError, SetupError
from lessonlib.engine.worker.store import cache_errors, write_atomically

log = get_plugin_logger(__name__)
# What MkDocs, the theme and this plugin write into the site besides the pages' own files.
SITE_OWN = {"sitemap.xml", "sitemap.xml.gz", "404.html", "search/search_index.json", "assets/", f"{DOWNLOADS}/"}
LOCAL_SITE = "http://127.0.0.1:8000/"  # mkdocs serve's address, where site_url is not set
# The engine's assets, added to every site as Material's plugins add theirs, in this order and
# before the site's own: its stylesheets may override the engine's, its scripts may call
# page-view.js's lessonlibOnPageView. Each is FOLDER/<name> in the site.
ASSETS = Path(__file__).resolve().parents[1] / "assets"
ASSET_NAMES = ("lessonlib.css", "exploration.css", "page-view.js", "exploration.js")
STYLESHEET = ASSETS / "lessonlib.css"  # figures, stamps, downloads
STYLESHEET_URI = f"{FOLDER}/lessonlib.css"  # in the site
_server = None  # mkdocs serve's LiveReloadServer: each rebuild makes a new plugin, the server stays
_serving = False  # this process is mkdocs serve
_last: dict = {}  # under serve: the last build's watched files as they were at its "start" and "end", its "inputs"


class LessonPlugin(BasePlugin[LessonConfig]):
    dirty = False  # mkdocs build --dirty: MkDocs writes into site_dir itself, over what is there
    staging: Staging | None = None  # where this build writes the site
    warnings: _Count | None = None
    watching: list = []  # under serve, what each build watches (set once the build starts)

    def on_startup(self, *, command, dirty):
        global _serving
        self.dirty = dirty
        _serving = command == "serve"

    @event_priority(100)  # first: the warning count covers every later event
    def on_config(self, config):
        self.root = Path(config.config_file_path).parent
        try:
            self.settings = settings_from(self.config, self.root, Path(config.config_file_path).name)
            self.project = read_project(self.root) if self.config.publish_package else None
        except SetupError as e:
            raise PluginError(str(e)) from None
        docs = Path(config.docs_dir).resolve()
        if not docs.is_relative_to(self.root.resolve()):  # pages are keyed on their paths in the project
            raise PluginError(f"docs_dir {config.docs_dir} is {docs}, outside the project {self.root.resolve()}: "
                              "lessonlib runs pages inside the project; move the folder in, not a link to it")
        self.install = Install(urljoin(config.site_url or LOCAL_SITE, f"{DOWNLOADS}/"), self.project.wheel_name,
                               self._rel(config.docs_dir), self.settings.publish_extras) if self.project else None
        if not config.repo_url:  # mkdocs.yml's edit_uri is a path in repo_url's repository: no source links without one
            config.edit_uri = None
        self.results: dict[str, PageResult] = {}
        self.docs_dir, self.watching = config.docs_dir, []  # watching: under serve, see _note_the_end
        self.warnings = _Count()
        logging.getLogger("mkdocs").addHandler(self.warnings)
        cache_dir = self.settings.cache_dir
        self.memo = HtmlMemo(cache_dir / "html.json" if cache_dir else None)
        extensions = config.markdown_extensions
        if "pymdownx.highlight" in extensions:  # the same extension, with its blocks kept in the memo
            options = config.mdx_configs.pop("pymdownx.highlight", {})
            extensions[extensions.index("pymdownx.highlight")] = MemoHighlightExtension(self.memo, **options)
        if not self.settings.execute:
            log.info("LESSONLIB_EXECUTE=0: showing code without running it")
        uris = [f"{FOLDER}/{name}" for name in ASSET_NAMES]  # first: the site's own may override or use them
        config.extra_css[:0] = [uri for uri in uris if uri.endswith(".css")]
        config.extra_javascript[:0] = [uri for uri in uris if uri.endswith(".js")]
        return config

    @event_priority(-100)  # last: the notebooks are pages by now (mkdocs-jupyter)
    def on_files(self, files, config):
        docs = Path(config.docs_dir).resolve()
        for file in [f for f in files if f.abs_src_path and _special(f.abs_src_path)]:
            log.warning(f"skipped {self._rel(file.abs_src_path)}: not a regular file (a FIFO, socket or device)")
            files.remove(file)
        # the project's files, not the theme's
        ours = [f for f in files if f.abs_src_path and docs in Path(f.abs_src_path).resolve().parents]
        pages = {f.src_uri for f in ours}
        twins = sorted(uri for uri in pages if uri.endswith(".md") and f"{uri[:-3]}.ipynb" in pages)
        if twins:  # one page address, one notebook download: one would silently replace the other
            page = self._rel(docs / twins[0])
            raise PluginError(f"{page} and {page[:-3]}.ipynb would be the same page and the same notebook download: "
                              "rename one of them")
        links = {str(extra) for extra in [*config.extra_css, *config.extra_javascript, *config.extra_templates]}
        for file in ours:
            if file.src_uri.endswith(".md"):
                links |= linked(file.src_uri, self._read(file.abs_src_path))
        hidden = set(unpublished([(f.src_uri, f.is_documentation_page()) for f in ours], links))
        for file in [f for f in ours if f.src_uri in hidden]:
            files.remove(file)
        self._add_source_pages(files, config)
        for name in ASSET_NAMES:
            files.append(File.generated(config, f"{FOLDER}/{name}", abs_src_path=str(ASSETS / name)))
        self.site_files = {f.dest_uri for f in files} | SITE_OWN  # what a page may not publish over
        return files

    def _add_source_pages(self, files, config) -> None:
        """A page per module that source_pages names, and their index (code/index.md)."""
        self.source_files: dict[str, File] = {}  # "lessonlib/x.py": its page
        branch = (config.edit_uri or "").strip("/").split("/")[1:2] or ["main"]  # blob/BRANCH/docs/
        pages = []
        for package in self.config.source_pages:
            try:
                found = source_pages.module_files(package)
            except LookupError as e:
                raise PluginError(f"{self.root / 'mkdocs.yml'}: {e}") from None
            for module, path in found:
                page = source_pages.source_page(module, path, config.repo_url or "", branch[0],
                                                lambda text, render: self.memo.get("source", text, render))
                pages.append(page)
                file = File.generated(config, page.src_uri, content=page.markdown, inclusion=InclusionLevel.NOT_IN_NAV)
                files.append(file)
                self.source_files[page.file] = file
        if pages:
            index = source_pages.index_page(pages)
            files.append(File.generated(config, f"{source_pages.FOLDER}/index.md", content=index))

    def on_pre_build(self, config):
        self._unless_only_the_last_build_changed_files(config)
        memoize_search(config.plugins.values(), self.memo)  # after every on_config: search makes its index there
        sources = []
        for file in get_files(config).documentation_pages():
            if file.src_uri.endswith(".md") and not file.inclusion.is_excluded() and not _special(file.abs_src_path):
                sources.append((self._read(file.abs_src_path), self._rel(file.abs_src_path)))
        try:
            results = execute_pages(sources, self.settings, report=log.info)
        except SetupError as e:
            raise PluginError(str(e)) from None
        errors = [r for r in results if isinstance(r, LessonError)]
        if errors:
            raise PluginError("\n\n".join(map(str, errors)))
        self.results = {r.page.path: r for r in results}
        self.published: dict[str, str] = {}  # site path: the page that published it
        self._stage(config)

    def _read(self, abs_src_path: str) -> str:
        try:
            return read_page(Path(abs_src_path), self._rel(abs_src_path))
        except LessonError as e:
            raise PluginError(str(e)) from None

    def _stage(self, config) -> None:
        """From here on MkDocs writes the site into a staging folder (it cleans that one)."""
        self.site_dir, self.staging = config.site_dir, None
        if self.dirty:
            return
        try:
            self.staging = Staging(Path(config.site_dir))
        except SetupError as e:
            raise PluginError(str(e)) from None
        config.site_dir = str(self.staging.path)

    @event_priority(-100)  # after other plugins' filters: what the templates compile against
    def on_env(self, env, config, files):
        return cache_compiled_templates(env)

    def on_page_markdown(self, markdown, page, config, files):
        if not page.file.src_uri.endswith(".md") or page.file.generated_by:  # a notebook, a code page
            return markdown
        path = self._rel(page.file.abs_src_path)
        text = self._read(page.file.abs_src_path)
        # MkDocs hands over the page without its front matter: its first `offset` lines.
        offset = text.count("\n") - markdown.count("\n")
        result = self.results.get(path)
        if result is None or "".join(result.page.lines) != text:  # edited since on_pre_build (serve)
            try:
                result = execute_page(text, path, self.settings)
            except (LessonError, SetupError) as e:
                raise PluginError(str(e)) from None
            self.results[path] = result
        rendered = result.markdown.split("\n", offset)[-1] if offset else result.markdown
        if result.outputs is None:
            return rendered
        site, folder = Path(config.site_dir), Path(page.file.dest_uri).parent  # where the page's links point
        for name, svg in figure_files(result.page, result.outputs.blocks).items():
            _write_to_site(site, (folder / name).as_posix(), svg)
        for name, data in result.outputs.published.items():  # lessonlib.publish, one page's files to a name
            where = (folder / name).as_posix()
            if any(own == where or own.startswith(f"{where}/") for own in self.site_files):
                raise PluginError(f"{path}:1: lessonlib.publish({name!r}) would write over {where}, which the site "
                                  "has already: give the file another name")
            other = self.published.setdefault(where, path)
            if other != path:
                raise PluginError(f"{path}:1: lessonlib.publish({name!r}) writes {where} in the site, "
                                  f"as {other} does: give one of them another name")
            _write_to_site(site, where, data)
        notebook = f"{Path(page.file.src_uri).stem}.ipynb"
        store = self.settings.cache_dir / "notebooks" if self.settings.cache_dir else None
        try:
            text = notebook_text(result.page, result.outputs, result.key, store, self.install)
        except SetupError as e:
            raise PluginError(str(e)) from None
        _write_to_site(site, (folder / notebook).as_posix(), text)
        link = f'<a href="{notebook}" download>Download this lesson as a Jupyter notebook</a>'
        return f"{rendered}\n{self._notebook_links(config, page, notebook, link)}\n"

    def _line_url(self, page, name: str, line: int) -> str | None:
        """The address of a line of a module's code page, from `page` (None: no such page)."""
        file = self.source_files.get(name)
        return f"{file.url_relative_to(page.file)}#{source_pages.LINE_ANCHOR.format(line=line)}" if file else None

    @staticmethod
    def _notebook_links(config, page, notebook: str, download: str = "") -> str:
        """The paragraph that offers a page's notebook: its download, and Colab where the site is published."""
        path = posixpath.join(posixpath.dirname(page.file.dest_uri), notebook)  # in the site, as gh-deploy pushes it
        colab = colab_url(config.site_url or LOCAL_SITE, config.repo_url or "", config.remote_branch, path)
        links = [download] if download else []
        if colab:
            links.append(f'<a href="{colab}">Open it in Colab</a>')
        return f'<p class="lessonlib-download">{" · ".join(links)}</p>' if links else ""

    def on_page_content(self, html, page, config, files):
        if page.file.generated_by:  # a code page
            return html
        html = source_pages.link_labels(html, lambda name, line: self._line_url(page, name, line))
        result = self.results.get(self._rel(page.file.abs_src_path))
        if result is not None and result.outputs is not None:
            html = fill_html_slots(html, result.page, result.outputs.blocks)
            calls = {call.name: self._line_url(page, call.file, call.line)
                     for block in result.outputs.blocks for call in block.calls}
            html = source_pages.link_names(html, {name: url for name, url in calls.items() if url})
        html = to_mathml(checks_out_of_search(html), self.memo)
        if page.file.src_uri.endswith(".ipynb"):  # an exercise: on_post_page writes its download
            notebook = Path(page.file.src_uri).name
            link = f'<a href="{notebook}" download>Download this exercise as a Jupyter notebook</a>'
            html += self._notebook_links(config, page, notebook, link)
        leaks = leftover_tex(html, self.memo)
        source = Path(page.file.abs_src_path)
        lines = source.read_text(encoding="utf-8").splitlines() if leaks and source.suffix == ".md" else []
        for leak in leaks:
            # A warning, so that a strict build fails while a draft build still shows the page.
            log.warning(f"{self._rel(source)}:{source_line(leak, lines)}: raw TeX in the page's text: {leak!r} "
                        "(inline math is $...$ with no space just inside either dollar; math uses only "
                        "commands latex2mathml knows)")
        return html

    @event_priority(-100)  # after mkdocs-jupyter has copied the notebook for its download button
    def on_post_page(self, output, page, config):
        """The exercise notebook offered for download starts with the install cell (publish_package),
        and the page links the stylesheets mkdocs-jupyter wrote into it."""
        source = Path(page.file.abs_src_path or page.file.src_uri)  # a code page has no file of its own
        if source.suffix == ".ipynb":
            if self.install:  # else mkdocs-jupyter's copy, as written
                text = published_exercise(source.read_text(encoding="utf-8"), self.install, page.file.src_uri)
                _write_to_site(Path(config.site_dir), (Path(page.file.dest_uri).parent / source.name).as_posix(), text)
            output, stylesheets = shared_stylesheets(output, page.url)
            for name, css in stylesheets.items():
                _write_to_site(Path(config.site_dir), name, css)
        return output

    def on_serve(self, server, config, builder):
        global _server
        _server = server
        self._watch_inputs(config)
        return server

    @event_priority(-100)  # last: after it, MkDocs only counts the warnings, as this does
    def on_post_build(self, config):
        """Keep the memo; publish the site unless the strict check is about to fail the build;
        under serve, watch every input a page read outside docs/."""
        try:
            with cache_errors(self.settings.cache_dir or self.root):
                self.memo.save()
            if self.project:
                self._publish_downloads(Path(config.site_dir))
        except SetupError as e:
            raise PluginError(str(e)) from None
        self._finish(config, publish=not (config.strict and self.warnings.count))
        self._watch_inputs(config)
        self._note_the_end()

    def _publish_downloads(self, site: Path) -> None:
        """What the notebooks install: the site's project as a wheel, and its pinned versions."""
        folder = site / DOWNLOADS
        try:
            constraints = (self.project.root / CONSTRAINTS).read_text(encoding="utf-8")
            # kept beside the notebooks that install it
            store = self.settings.cache_dir / "notebooks" if self.settings.cache_dir else None
            write_atomically(folder / self.project.wheel_name, wheel_bytes(self.project, store))
            write_atomically(folder / CONSTRAINTS, constraints)
        except OSError as e:
            what = f"{self.project.name}'s wheel and {CONSTRAINTS}"
            raise SetupError(f"cannot publish {DOWNLOADS}/ ({what}): {e}") from None

    def on_build_error(self, error):
        self._finish(None, publish=False)
        self._note_the_end()

    def _unless_only_the_last_build_changed_files(self, config) -> None:
        """Under serve: note the watched files as this build starts, and stop it in one line if
        the last build changed some while it ran and nothing has changed since: its own writes
        asked for it, and running its pages again would write again, and rebuild forever."""
        if not _serving:
            return
        self.watching = [config.docs_dir, config.config_file_path, *_last.get("inputs", ())]
        now = _states(self.watching)
        changed = _only_changed_during(_last.get("start", {}), _last.get("end", {}), now)
        _last.update(start=now, end=now)
        if changed:
            first, more = os.path.relpath(changed[0], self.root), f" and {len(changed) - 1} more" * (len(changed) > 1)
            raise PluginError(f"not rebuilt: {first}{more} changed while the last build ran and nothing has since "
                              "(a page that writes its own input would rebuild forever): change a file to build again")

    def _note_the_end(self) -> None:
        if self.watching:  # under serve, once the build has started
            _last.update(end=_states(self.watching), inputs=sorted(
                name for result in self.results.values() for name in self._inputs_outside_docs(result)))

    def _finish(self, config, publish: bool) -> None:
        if self.warnings is not None:
            logging.getLogger("mkdocs").removeHandler(self.warnings)
        if self.staging is None:
            return
        if publish:
            self.staging.publish()
            config.site_dir = self.site_dir  # what comes after (gh-deploy) finds the site there
        else:
            self.staging.discard()
        self.staging = None

    def _watch_inputs(self, config) -> None:
        """MkDocs watches docs/ itself."""
        if _server is None:
            return
        for result in self.results.values():
            for name in self._inputs_outside_docs(result):
                _server.watch(name, recursive=False)

    def _inputs_outside_docs(self, result: PageResult) -> list[str]:
        docs = Path(self.docs_dir).resolve()
        names = result.inputs.paths(self.settings.root) if result.inputs else []
        return [name for name in names if docs not in Path(name).parents and Path(name).exists()]

    def _rel(self, path: str | Path) -> str:
        return Path(path).resolve().relative_to(self.root.resolve()).as_posix()


def _write_to_site(site: Path, name: str, text: str | bytes) -> None:
    """The file `name` (a path in the site) of the site being built: a disk that refuses it is
    one line, and the site stays as it was (it is published only once the build is done)."""
    try:
        write_atomically(in_site(site, name), text)
    except ValueError as e:
        raise PluginError(f"cannot write into the site being built: {e}") from None
    except OSError as e:
        raise PluginError(f"cannot write {name} into the site being built: {e.strerror or e}") from None


class _Count(logging.Handler):
    """The warnings logged during a build, as MkDocs counts them for --strict."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1



def _states(paths: list[str]) -> dict[str, tuple | None]:
    """Each file under these paths (folders walked), as a change shows: size, time, inode."""
    files = [os.path.join(folder, name) for path in paths for folder, _, names in os.walk(path) for name in names]
    states = {}
    for file in [*files, *(p for p in paths if not os.path.isdir(p))]:
        try:
            info = os.stat(file)
            states[file] = (info.st_size, info.st_mtime_ns, info.st_ino)
        except OSError:
            states[file] = None
    return states


def _only_changed_during(start: dict, end: dict, now: dict) -> list[str]:
    """The files that changed between a build's `start` and `end`, if none has changed since
    (`now`); else none."""
    paths = start.keys() | end.keys() | now.keys()
    if not end or any(now.get(p) != end.get(p) for p in paths):
        return []
    return sorted(p for p in paths if start.get(p) != end.get(p))


def _special(path: str) -> bool:
    """A FIFO, socket or device, which reading could wait on forever (a dangling link is MkDocs's to report)."""
    try:
        return not stat.S_ISREG(Path(path).stat().st_mode)
    except OSError:
        return False

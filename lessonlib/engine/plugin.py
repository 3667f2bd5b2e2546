"""The MkDocs door: a thin plugin over execute_pages.

Every executable page runs in ``on_pre_build``, which MkDocs calls before it cleans site_dir:
a failing page stops the build and the previous site stays as it was. The pages are then
rendered from those results; what they render the same way every time (highlighted code,
MathML, search entries) comes from an HtmlMemo. Under ``mkdocs serve``, what the pages read
(helpers, data files, lessonlib's modules) is watched too, so editing any of it rebuilds.
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.config import base, load_config
from mkdocs.config import config_options as c
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, get_plugin_logger
from mkdocs.structure.files import get_files

from lessonlib.engine.cache import write_atomically
from lessonlib.engine.errors import LessonError
from lessonlib.engine.html_memo import HtmlMemo, MemoHighlightExtension
from lessonlib.engine.mathml import leftover_tex, source_line, to_mathml
from lessonlib.engine.notebook import notebook_text
from lessonlib.engine.page import PageResult, Settings, execute_page, execute_pages
from lessonlib.engine.render import figure_files
from lessonlib.engine.search_memo import memoize_search

log = get_plugin_logger(__name__)
_server = None  # mkdocs serve's LiveReloadServer: each rebuild makes a new plugin, the server stays


class LessonConfig(base.Config):
    timeout = c.Type((int, float), default=600)  # seconds per block; a block may say timeout=N
    cache_dir = c.Type(str, default=".lessonlib-cache")  # relative to mkdocs.yml
    # pages run at once, and processes a page's experiments may start; 0: one per core (LESSONLIB_WORKERS overrides)
    workers = c.Type(int, default=0)
    memory_limit_mb = c.Optional(c.Type((int, float)))  # per page, with its child processes
    output_limit_kb = c.Type((int, float), default=1024)  # per block, text and figures
    cache_limit_mb = c.Type((int, float), default=1024)  # the least recently used entries go first


class LessonPlugin(BasePlugin[LessonConfig]):
    def on_config(self, config):
        self.root = Path(config.config_file_path).parent
        self.settings = settings_from(self.config, self.root)
        self.results: dict[str, PageResult] = {}
        cache_dir = self.settings.cache_dir
        self.memo = HtmlMemo(cache_dir / "html.json" if cache_dir else None)
        extensions = config.markdown_extensions
        if "pymdownx.highlight" in extensions:  # the same extension, with its blocks kept in the memo
            options = config.mdx_configs.pop("pymdownx.highlight", {})
            extensions[extensions.index("pymdownx.highlight")] = MemoHighlightExtension(self.memo, **options)
        if not self.settings.execute:
            log.info("LESSONLIB_EXECUTE=0: showing code without running it")
        return config

    def on_pre_build(self, config):
        memoize_search(config.plugins.values(), self.memo)  # after every on_config: search makes its index there
        sources = []
        for file in get_files(config).documentation_pages():
            if file.src_uri.endswith(".md") and not file.inclusion.is_excluded():
                sources.append((Path(file.abs_src_path).read_text(encoding="utf-8"), self._rel(file.abs_src_path)))
        results = execute_pages(sources, self.settings, report=log.info)
        errors = [r for r in results if isinstance(r, LessonError)]
        if errors:
            raise PluginError("\n\n".join(map(str, errors)))
        self.results = {r.page.path: r for r in results}

    def on_page_markdown(self, markdown, page, config, files):
        if not page.file.src_uri.endswith(".md"):  # a notebook page (mkdocs-jupyter renders it)
            return markdown
        path = self._rel(page.file.abs_src_path)
        text = Path(page.file.abs_src_path).read_text(encoding="utf-8")
        # MkDocs hands over the page without its front matter: its first `offset` lines.
        offset = text.count("\n") - markdown.count("\n")
        result = self.results.get(path)
        if result is None or "".join(result.page.lines) != text:  # edited since on_pre_build (serve)
            try:
                result = execute_page(text, path, self.settings)
            except LessonError as e:
                raise PluginError(str(e)) from None
        rendered = result.markdown.split("\n", offset)[-1] if offset else result.markdown
        if result.outputs is None:
            return rendered
        folder = Path(config.site_dir) / Path(page.file.dest_uri).parent  # where the page's links point
        for name, svg in figure_files(result.page, result.outputs[0]).items():
            write_atomically(folder / name, svg)
        notebook = f"{Path(page.file.src_uri).stem}.ipynb"
        store = self.settings.cache_dir / "notebooks" if self.settings.cache_dir else None
        write_atomically(folder / notebook, notebook_text(result.page, result.outputs, result.key, store))
        link = f'<p class="lessonlib-download"><a href="{notebook}" download>Download this lesson as a Jupyter notebook</a></p>'
        return f"{rendered}\n{link}\n"

    def on_page_content(self, html, page, config, files):
        html = to_mathml(html, self.memo)
        source = Path(page.file.abs_src_path)
        lines = source.read_text(encoding="utf-8").splitlines() if source.suffix == ".md" else []
        for leak in leftover_tex(html):
            # A warning, so that a strict build fails while a draft build still shows the page.
            log.warning(f"{self._rel(source)}:{source_line(leak, lines)}: raw TeX in the page's text: {leak!r} "
                        "(inline math is $...$ with no space just inside either dollar; math uses only "
                        "commands latex2mathml knows)")
        return html

    def on_serve(self, server, config, builder):
        global _server
        _server = server
        self.on_post_build(config)
        return server

    def on_post_build(self, config):
        """Keep the memo; under serve, watch every input a page read outside docs/ (MkDocs
        watches docs/ itself)."""
        self.memo.save()
        if _server is None:
            return
        docs = Path(config.docs_dir).resolve()
        for result in self.results.values():
            for kind in ("modules", "files", "dirs") if result.inputs else ():
                for name in getattr(result.inputs, kind):
                    if docs not in Path(name).parents and Path(name).exists():
                        _server.watch(name, recursive=False)

    def _rel(self, path: str | Path) -> str:
        return Path(path).resolve().relative_to(self.root.resolve()).as_posix()


def settings_from(config: LessonConfig, root: Path) -> Settings:
    return Settings(root=root, timeout=float(config.timeout), cache_dir=root / config.cache_dir,
                    workers=config.workers, memory_limit_mb=config.memory_limit_mb,
                    output_limit_kb=float(config.output_limit_kb),
                    cache_limit_mb=float(config.cache_limit_mb)).with_environment()


def load_settings(config_file: Path) -> Settings:
    """The build's settings, read from mkdocs.yml, for the CLI and the pytest collector."""
    config = load_config(str(config_file))
    return settings_from(config.plugins["lessonlib"].config, config_file.parent)

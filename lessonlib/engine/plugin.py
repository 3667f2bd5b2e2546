"""The MkDocs door: a thin plugin over execute_page."""
from __future__ import annotations

from pathlib import Path

import nbformat
from mkdocs.config import base, load_config
from mkdocs.config import config_options as c
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, get_plugin_logger

from lessonlib.engine.errors import LessonError
from lessonlib.engine.mathml import leftover_tex, source_line, to_mathml
from lessonlib.engine.notebook import to_notebook
from lessonlib.engine.page import Settings, execute_page

log = get_plugin_logger(__name__)


class LessonConfig(base.Config):
    timeout = c.Type((int, float), default=600)  # seconds per block; a block may say timeout=N
    cache_dir = c.Type(str, default=".lessonlib-cache")  # relative to mkdocs.yml


class LessonPlugin(BasePlugin[LessonConfig]):
    def on_config(self, config):
        self.settings = settings_from(self.config, Path(config.config_file_path).parent)
        if not self.settings.execute:
            log.info("LESSONLIB_EXECUTE=0: showing code without running it")
        return config

    def on_page_markdown(self, markdown, page, config, files):
        root = Path(config.config_file_path).parent
        source = Path(page.file.abs_src_path)
        # MkDocs hands over the page without its front matter; pad it back so lines match the file.
        offset = source.read_text(encoding="utf-8").count("\n") - markdown.count("\n")
        try:
            result = execute_page("\n" * offset + markdown, source.relative_to(root).as_posix(), self.settings)
        except LessonError as e:
            raise PluginError(str(e)) from None
        if result.outputs is None:
            return result.markdown[offset:]
        how = "from cache" if result.from_cache else f"ran {result.blocks_run} blocks"
        log.info(f"{result.page.path}: {how} in {result.seconds:.2f} s")
        notebook = f"{Path(page.file.src_uri).stem}.ipynb"
        target = Path(config.site_dir) / Path(page.file.dest_uri).parent / notebook
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(to_notebook(result.page, result.outputs), target)
        link = f'<p class="lessonlib-download"><a href="{notebook}" download>Download this lesson as a Jupyter notebook</a></p>'
        return f"{result.markdown[offset:]}\n{link}\n"

    def on_page_content(self, html, page, config, files):
        source = Path(page.file.abs_src_path)
        lines = source.read_text(encoding="utf-8").splitlines() if source.suffix == ".md" else []
        for leak in leftover_tex(html):
            # A warning, so that a strict build fails while a draft build still shows the page.
            where = f"{source.relative_to(Path(config.config_file_path).parent).as_posix()}:{source_line(leak, lines)}"
            log.warning(f"{where}: raw TeX in the page's text: {leak!r} (inline math is $...$ with no "
                        "space just inside either dollar)")
        return to_mathml(html)


def settings_from(config: LessonConfig, root: Path) -> Settings:
    return Settings(timeout=float(config.timeout), cache_dir=root / config.cache_dir).with_environment()


def load_settings(config_file: Path) -> Settings:
    """The build's settings, read from mkdocs.yml, for the CLI and the pytest collector."""
    config = load_config(str(config_file))
    return settings_from(config.plugins["lessonlib"].config, config_file.parent)

"""The theme's templates are compiled once per process, not once per build
(lessonlib.engine.builder.templates), and never reused where they would compile otherwise."""
from __future__ import annotations

from unittest import mock

import jinja2
import pytest

from lessonlib.engine.builder import templates


@pytest.fixture(autouse=True)
def no_compiled_templates(monkeypatch) -> None:
    monkeypatch.setattr(templates, "_CACHES", {})


def environment(sources: dict[str, str], **settings) -> jinja2.Environment:
    """A new environment, as each MkDocs build makes one."""
    return templates.cache_compiled_templates(jinja2.Environment(loader=jinja2.DictLoader(sources), **settings))


def render(env: jinja2.Environment, name: str, **values) -> tuple[str, int]:
    """What the template renders, and how many templates were compiled for it."""
    with mock.patch.object(jinja2.Environment, "compile", autospec=True,
                           side_effect=jinja2.Environment.compile) as compile_:
        return env.get_template(name).render(**values), compile_.call_count


def test_a_new_environment_reuses_the_compiled_template_until_its_source_changes():
    assert render(environment({"page.html": "Hello {{ who }}"}), "page.html", who="you") == ("Hello you", 1)
    assert render(environment({"page.html": "Hello {{ who }}"}), "page.html", who="you") == ("Hello you", 0)
    assert render(environment({"page.html": "Bye {{ who }}"}), "page.html", who="you") == ("Bye you", 1)


def test_settings_that_change_the_compiled_code_compile_it_again():
    source = {"page.html": "[[ who ]] {{ who|shout }}"}
    shout = environment(source)
    shout.filters["shout"] = str.upper  # as a plugin adds one, before the first template is loaded
    shout = templates.cache_compiled_templates(shout)
    assert render(shout, "page.html", who="you") == ("[[ who ]] YOU", 1)
    with pytest.raises(jinja2.TemplateAssertionError, match="No filter named 'shout'"):
        render(environment(source), "page.html", who="you")  # as it would without the cache
    brackets = environment(source, variable_start_string="[[", variable_end_string="]]")
    brackets.filters["shout"] = str.upper
    assert render(templates.cache_compiled_templates(brackets), "page.html", who="you") == ("you {{ who|shout }}", 1)

"""The theme's templates compiled once per process, not once per build.

MkDocs makes a new Jinja environment for every build, which compiles the theme's templates again:
most of a small site's build, and of every rebuild under ``mkdocs serve``. Jinja's bytecode cache
keeps each template's compiled code, checked against the template's source; the environment's
settings that change the compiled code (syntax, extensions, the filters and tests a template may
name, autoescaping) pick which cache, so code compiled under other settings is never used.
"""
from __future__ import annotations

import jinja2
from jinja2.bccache import Bucket, BytecodeCache


class _InMemory(BytecodeCache):
    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        if (code := self._code.get(bucket.key)) is not None:
            bucket.bytecode_from_string(code)  # reset, and so compiled again, if the source changed

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_CACHES: dict[tuple, _InMemory] = {}


def _compiled_by(env: jinja2.Environment) -> tuple:
    return (
        env.block_start_string, env.block_end_string, env.variable_start_string, env.variable_end_string,
        env.comment_start_string, env.comment_end_string, env.line_statement_prefix, env.line_comment_prefix,
        env.trim_blocks, env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
        env.optimized, env.is_async, repr(env.autoescape), repr(env.finalize), env.code_generator_class,
        tuple(sorted(env.extensions)), frozenset(env.filters), frozenset(env.tests),
    )


def cache_compiled_templates(env: jinja2.Environment) -> jinja2.Environment:
    """`env`, set to reuse what earlier environments of the same settings in this process compiled."""
    env.bytecode_cache = _CACHES.setdefault(_compiled_by(env), _InMemory())
    return env

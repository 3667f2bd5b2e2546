"""Explorations: a figure the reader drives, every frame of it computed when the page is built.

Pages import it as `lessonlib.exploration`. A lesson declares one in a `python exec hide-code
html` block: it draws one figure per state (each rendered with `frame_svg`), wraps each in a
`Frame` with the control's label for that state and an alt text stating what that frame shows,
and prints `exploration_html(...)`:

    frames = [Frame(f"{r:.2f}", frame_svg(draw(r)), f"At radius {r:.2f} ...") for r in radii]
    print(exploration_html(frames, control="Spectral radius", caption="...", kind="range"))

Why frames and not a plotting library in the browser: every number stays the page's own (computed,
checked, and the same on every build), nothing is fetched, and the reader's browser only shows
and hides pictures. The markup (lessonlib/engine/assets/exploration.js drives it, with
exploration.css beside it: the plugin adds both to every site) is, without JavaScript
and in print, the frames one after another, each with its label and alt text; with it, a native
control (a range input or a group of radio buttons, both operable by keyboard) shows one frame at
a time and announces the state and its finding in a live region. A frame may carry a small table
of its numbers, shown on demand in a collapsed block under it.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from matplotlib.figure import Figure

from lessonlib.engine.worker.session import ALT_LIMIT  # as for every figure of a page

Kind = Literal["range", "radio"]


@dataclass(frozen=True)
class Table:
    """A frame's numbers, for the reader who asks for them: column names and formatted cells."""

    columns: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Frame:
    """One state of the exploration: its label on the control, its figure and its finding."""

    label: str  # what the control says for this state, e.g. "1.50" or "mask on"
    svg: str  # the figure, as SVG text (frame_svg)
    alt: str  # the finding, at most ALT_LIMIT characters; not the caption
    table: Table | None = None  # its numbers, on demand


def frame_svg(fig: Figure) -> str:
    """The figure as deterministic SVG text, drawn as the page's other figures are; it is closed,
    so the block that draws it publishes no figure of its own."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def exploration_html(frames: Sequence[Frame], *, control: str, caption: str, kind: Kind = "range",
                     start: int = 0) -> str:
    """The exploration's markup: one HTML element with no blank lines (for an `exec html` block).

    `control` names what the reader changes ("Spectral radius of W_h"), `caption` says what every
    frame draws and how to read it, `start` is the frame shown first."""
    _validate(frames, control, caption, kind, start)
    esc = html.escape
    key = "exploration-" + hashlib.sha256(f"{control}\n{caption}".encode()).hexdigest()[:10]
    items = "\n".join(_frame(n, f, control) for n, f in enumerate(frames))
    return f"""<figure class="lessonlib-exploration" id="{key}" data-kind="{kind}" data-start="{start}">
<div class="lessonlib-exploration__controls" hidden>
{_control(frames, control, kind, start, key)}
<p class="lessonlib-exploration__status" aria-live="polite" aria-atomic="true"></p>
</div>
<ol class="lessonlib-exploration__frames" aria-label="{esc(control)}: every state">
{items}
</ol>
<figcaption>{esc(caption)}</figcaption>
</figure>"""


def _validate(frames: Sequence[Frame], control: str, caption: str, kind: str, start: int) -> None:
    if len(frames) < 2:
        raise ValueError(f"an exploration needs at least two frames, got {len(frames)}")
    if kind not in ("range", "radio"):
        raise ValueError(f"kind must be 'range' or 'radio', got {kind!r}")
    if not control.strip() or not caption.strip():
        raise ValueError("an exploration needs a control label and a caption")
    if not 0 <= start < len(frames):
        raise ValueError(f"start must be in 0..{len(frames) - 1}, got {start}")
    labels = [f.label for f in frames]
    if len(set(labels)) != len(labels) or not all(label.strip() for label in labels):
        raise ValueError(f"every frame needs its own label, got {labels}")
    for f in frames:
        if not f.alt.strip() or len(f.alt) > ALT_LIMIT:
            raise ValueError(f"frame {f.label!r}: alt text needs 1 to {ALT_LIMIT} characters, has {len(f.alt)}")
        if " ".join(f.alt.split()) == " ".join(caption.split()):
            raise ValueError(f"frame {f.label!r}: the alt text states the finding; it is not the caption")


def _control(frames: Sequence[Frame], control: str, kind: str, start: int, key: str) -> str:
    esc = html.escape
    if kind == "range":
        ticks = "".join(f'<option value="{n}" label="{esc(f.label)}"></option>' for n, f in enumerate(frames))
        return (
            f'<label class="lessonlib-exploration__label" for="{key}-input">{esc(control)}</label> '
            f'<input type="range" id="{key}-input" min="0" max="{len(frames) - 1}" step="1" value="{start}" '
            f'list="{key}-ticks" aria-valuetext="{esc(frames[start].label)}">'
            f' <output class="lessonlib-exploration__value" for="{key}-input">{esc(frames[start].label)}</output>'
            f'<datalist id="{key}-ticks">{ticks}</datalist>'
        )
    options = "".join(
        f'<label><input type="radio" name="{key}" value="{n}"{" checked" if n == start else ""}> '
        f"{esc(f.label)}</label>"
        for n, f in enumerate(frames)
    )
    return (f'<fieldset class="lessonlib-exploration__radios"><legend class="lessonlib-exploration__label">'
            f"{esc(control)}</legend>{options}</fieldset>")


def _frame(n: int, frame: Frame, control: str) -> str:
    esc = html.escape
    # A data URI keeps the markup whole wherever it is shown (a notebook); the site links each
    # frame as a file beside the page (lessonlib.engine.builder.render.figure_files).
    src = "data:image/svg+xml;base64," + base64.b64encode(frame.svg.encode()).decode()
    numbers = ""
    if frame.table is not None:
        head = "".join(f'<th scope="col">{esc(c)}</th>' for c in frame.table.columns)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in frame.table.rows)
        numbers = (f'<details class="lessonlib-exploration__numbers"><summary>The numbers, {esc(control)}: '
                   f'{esc(frame.label)}</summary><div class="lessonlib-exploration__scroll"><table><thead><tr>{head}'
                   f"</tr></thead><tbody>{body}</tbody></table></div></details>")
    return (f'<li class="lessonlib-exploration__frame lessonlib-figure" data-frame="{n}" '
            f'data-label="{esc(frame.label)}">'
            f'<p class="lessonlib-exploration__frame-label">{esc(control)}: {esc(frame.label)}</p>'
            f'<img src="{src}" alt="{esc(frame.alt)}">{numbers}</li>')

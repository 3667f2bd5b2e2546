"""The language-model lesson's live widget: its markup, for an `exec html` block.

The markup holds what a reader without JavaScript sees (samples the models wrote when the page
was built, and the lesson's learning curves) and the controls, hidden until
docs/javascripts/char-models.js has loaded the models' weights (published beside the page by
lessonlib.export) and shows them. If the weights fail to load, the script says so in one line
and the samples and the curves stay.
"""
from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping

from lessonlib.engine.worker import svg


def drawn_figure(alt: str) -> tuple[str, str]:
    """The figure just drawn, as SVG text the way the engine publishes a block's figure, and its
    alt text. Drawn again from the same numbers, it is the same bytes, so the fallback links the
    file the page already has (figure files are named by content); taken here, the block does not
    show it a second time."""
    (drawn,) = svg.take_figures()
    return drawn, alt


def widget_html(manifests: Mapping[str, str], samples: Mapping[str, str], *, writer: str, vocab: int,
                figure: tuple[str, str], cell: int = 0) -> str:
    """manifests: {"lstm": file name, "gpt": file name} beside the page; samples: {label: text},
    written by the model named `writer`;
    figure: (SVG text, alt text), shown without JavaScript (drawn_figure); cell: the LSTM cell the
    view opens on. One element with no blank lines (an `exec html` block's output)."""
    esc = html.escape
    drawn, alt = figure
    # a data URI, which the engine links as the figure's file beside the page
    image = base64.b64encode(drawn.encode()).decode()
    fallback = "".join(f"<p class=\"char-model__sample-label\">{esc(label)}</p><pre class=\"char-model__sample\">"
                       f"{esc(text)}</pre>" for label, text in samples.items())
    models = esc(json.dumps(dict(manifests)), quote=True)
    return "".join([
        f'<div class="char-model" data-models="{models}">',
        '<div class="char-model__fallback">',
        f"<p>Samples the {esc(writer)} wrote when this page was built, from the start of a line:</p>",
        fallback,
        f'<figure class="lessonlib-figure char-model__figure"><img src="data:image/svg+xml;base64,{image}" '
        f'alt="{esc(alt, quote=True)}"></figure>',
        "</div>",
        '<p class="char-model__error" hidden></p>',
        '<div class="char-model__live" hidden>',
        '<fieldset class="char-model__models"><legend>Model</legend>',
        '<label><input type="radio" name="char-model-kind" value="lstm"> LSTM (reads the whole prompt, '
        "up to 12,000 characters, carrying its state)</label>",
        '<label><input type="radio" name="char-model-kind" value="gpt" checked> Transformer (reads the last '
        "64 characters, its context)</label>",
        "</fieldset>",
        '<label class="char-model__prompt-label" for="char-model-prompt">Prompt</label>',
        '<textarea id="char-model-prompt" class="char-model__prompt" rows="3" spellcheck="false">'
        "Ham.\nTo be, or not to b</textarea>",
        '<p class="char-model__note" id="char-model-note"></p>',
        '<div class="char-model__knobs">',
        '<label>Temperature <input type="range" class="char-model__temperature" min="0.1" max="2" step="0.1" '
        'value="1"> <output class="char-model__temperature-value">1.0</output></label>',
        f'<label>Top-k <input type="number" class="char-model__top-k" min="1" max="{vocab}" step="1" '
        f'value="{vocab}"></label>',
        "</div>",
        '<p class="char-model__caption" id="char-model-caption">The next character\'s probabilities '
        "(top 10), after temperature and top-k:</p>",
        '<div class="char-model__bars" aria-hidden="true"></div>',
        '<table class="char-model__table"><caption>Next-character probabilities, the 10 most likely</caption>'
        '<thead><tr><th scope="col">character</th><th scope="col">probability</th></tr></thead>'
        "<tbody></tbody></table>",
        '<button type="button" class="char-model__write">Write 200 characters</button>',
        '<pre class="char-model__written" hidden></pre>',
        # the LSTM: one cell's activation over the prompt; the transformer: one head's attention
        '<div class="char-model__inside">',
        '<div class="char-model__cells" data-for="lstm">',
        '<label>LSTM cell <input type="number" class="char-model__cell" min="0" max="0" step="1" '
        f'value="{int(cell)}"></label>',
        '<p class="char-model__inside-caption">Each character shaded by this cell\'s tanh(c) after it: blue '
        "&minus;1 to red +1.</p>",
        "</div>",
        '<div class="char-model__heads" data-for="gpt">',
        '<label>Transformer layer <input type="number" class="char-model__layer" min="1" max="1" step="1" '
        'value="1"></label>',
        '<label>Head <input type="number" class="char-model__head" min="1" max="1" step="1" value="1"></label>',
        '<p class="char-model__inside-caption">The window shaded by this head\'s attention from its last '
        "character.</p>",
        "</div>",
        '<div class="char-model__shaded" aria-hidden="true"></div>',
        '<p class="char-model__inside-summary"></p>',
        "</div>",
        "</div>",
        '<p class="char-model__status" role="status" aria-live="polite"></p>',
        "</div>",
    ])

"""The language-model lesson's live widget: its markup, for an `exec html` block.

The markup holds what a reader without JavaScript sees (samples the models wrote when the page
was built) and the controls, hidden until docs/javascripts/char-models.js has loaded the models'
weights (published beside the page by lessonlib.export) and shows them. If the weights fail to
load, the script says so in one line and the samples stay.
"""
from __future__ import annotations

import html
import json
from collections.abc import Mapping


def widget_html(manifests: Mapping[str, str], samples: Mapping[str, str], *, vocab: int) -> str:
    """manifests: {"lstm": file name, "gpt": file name} beside the page; samples: {label: text}.
    One element with no blank lines (an `exec html` block's output)."""
    esc = html.escape
    fallback = "".join(f"<p class=\"char-model__sample-label\">{esc(label)}</p><pre class=\"char-model__sample\">"
                       f"{esc(text)}</pre>" for label, text in samples.items())
    models = esc(json.dumps(dict(manifests)), quote=True)
    return "".join([
        f'<div class="char-model" data-models="{models}">',
        '<div class="char-model__fallback">',
        "<p>Samples the transformer wrote when this page was built, from the start of a line:</p>",
        fallback,
        "</div>",
        '<p class="char-model__error" hidden></p>',
        '<div class="char-model__live" hidden>',
        '<fieldset class="char-model__models"><legend>Model</legend>',
        '<label><input type="radio" name="char-model-kind" value="lstm"> LSTM (reads the whole prompt, '
        "up to its last 2,000 characters)</label>",
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
        "</div>",
        '<p class="char-model__status" role="status" aria-live="polite"></p>',
        "</div>",
    ])

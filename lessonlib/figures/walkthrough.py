"""A step-by-step walkthrough of one LSTM memory update, followed on one coordinate.

`lstm_walkthrough_steps` runs lessonlib's LSTM cell on a small seeded example and records each
stage (forget gate, input gate and candidate, new cell, output gate, new hidden value);
`walkthrough_html` turns those steps into the widget's markup: a static table of every step
(what readers without JavaScript and printed pages get), the player that
docs/javascripts/walkthrough.js drives, and the same steps as JSON in a data-steps attribute.
"""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field

import torch

from lessonlib.device import device as build_device
from lessonlib.models.lstm import LSTM, open_forget_gate

INPUT_SIZE, HIDDEN_SIZE = 2, 3
EARLIER_INPUTS = 2  # steps run before the one we follow, so that h_prev and c_prev are not zero


@dataclass(frozen=True)
class Step:
    """One stage of the update: its formula, the numbers plugged into it, and what it yields."""

    title: str
    formula: str
    plugged: str
    results: dict[str, float]  # symbol -> value this stage yields, e.g. {"f": 0.95}
    preactivations: dict[str, float] = field(default_factory=dict)  # e.g. {"z_f": 2.9}

    @property
    def result(self) -> str:
        return ", ".join(f"{name} = {number(value)}" for name, value in self.results.items())


def number(value: float) -> str:
    """Three decimals with a real minus sign, as every number of the widget is shown."""
    return f"{value:.3f}".replace("-", "−")


def factor(value: float) -> str:
    """A number as a factor in a product: negatives in parentheses."""
    return f"({number(value)})" if value < 0 else number(value)


def walkthrough_example(seed: int = 1, device: torch.device | str | None = None) -> tuple[LSTM, torch.Tensor]:
    """The example LSTM (forget gate opened) and its input sequence (T, 1, I), both drawn from `seed`.

    Drawn on the CPU in float64, outside the global random stream, so every device shows the
    same example, the page's later draws are unaffected, and the gates' logits are exact."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lstm = open_forget_gate(LSTM(INPUT_SIZE, HIDDEN_SIZE, dtype=torch.float64))
        inputs = torch.randn(EARLIER_INPUTS + 1, 1, INPUT_SIZE, dtype=torch.float64)
    target = build_device() if device is None else torch.device(device)
    return lstm.to(target), inputs.to(target)


def lstm_walkthrough_steps(
    seed: int = 1, coordinate: int = 1, device: torch.device | str | None = None
) -> list[Step]:
    """The last step of the seeded example, followed on hidden unit `coordinate`."""
    if not 0 <= coordinate < HIDDEN_SIZE:
        raise ValueError(f"coordinate must be in 0..{HIDDEN_SIZE - 1}, got {coordinate}")
    lstm, inputs = walkthrough_example(seed, device)
    h = c = inputs.new_zeros(1, HIDDEN_SIZE)
    with torch.no_grad():
        for x_t in inputs[:-1]:
            earlier = lstm.step(x_t, (h, c))
            h, c = earlier.h, earlier.c
        step = lstm.step(inputs[-1], (h, c))

    def at(t: torch.Tensor) -> float:
        return t[0, coordinate].item()

    x_t = inputs[-1, 0].tolist()
    h_prev, c_prev = at(h), at(c)
    f, i, g, o, c_new, h_new = map(at, (step.forget, step.input, step.candidate, step.output, step.c, step.h))
    # LSTMStep keeps the gates, not their pre-activations; in float64 the inverse is exact enough.
    z_f, z_i, z_o = (torch.logit(torch.tensor(v, dtype=torch.float64)).item() for v in (f, i, o))
    z_g = torch.atanh(torch.tensor(g, dtype=torch.float64)).item()
    return [
        Step("State carried in", f"unit {coordinate} of the state from step t−1; input x_t",
             "x_t = (" + ", ".join(map(number, x_t)) + ")", {"c_prev": c_prev, "h_prev": h_prev}),
        Step("Forget gate", "f = σ(z_f)", f"σ({number(z_f)})", {"f": f}, {"z_f": z_f}),
        Step("Input gate and candidate", "i = σ(z_i), g = tanh(z_g)",
             f"σ({number(z_i)}), tanh({number(z_g)})", {"i": i, "g": g}, {"z_i": z_i, "z_g": z_g}),
        Step("New cell value", "c = f·c_prev + i·g",
             f"{number(f)}·{factor(c_prev)} + {number(i)}·{factor(g)}", {"c": c_new}),
        Step("Output gate", "o = σ(z_o)", f"σ({number(z_o)})", {"o": o}, {"z_o": z_o}),
        Step("New hidden value", "h = o·tanh(c)", f"{number(o)}·tanh({number(c_new)})", {"h": h_new}),
    ]


def walkthrough_html(steps: list[Step]) -> str:
    """The widget's markup, one HTML element with no blank lines (for an `exec html` block)."""
    esc = html.escape
    scale = max([1.0, *(abs(v) for s in steps for v in s.results.values())])
    rows = "\n".join(
        f'<tr data-step="{n}"><th scope="row">{n + 1}. {esc(s.title)}</th><td>{_narrow(s.formula)}</td>'
        f"<td>{_narrow(s.plugged)}</td><td>{_narrow(s.result)}</td></tr>"
        for n, s in enumerate(steps)
    )
    boxes = [_box(n, name, value, scale) for n, s in enumerate(steps) for name, value in s.results.items()]
    diagram = "\n".join(boxes)
    # The data rides in an attribute, not a <script type="application/json"> island: Material's
    # instant navigation re-creates inline scripts without their type and class.
    data = esc(json.dumps([{**asdict(s), "result": s.result} for s in steps], ensure_ascii=False))
    return f"""<div class="lstm-walkthrough" role="group" aria-label="One LSTM memory update, step by step" data-steps="{data}">
<div class="lstm-walkthrough__player" hidden>
<div class="lstm-walkthrough__live" aria-live="polite" aria-atomic="true">
<p class="lstm-walkthrough__status"></p>
<p><span class="lstm-walkthrough__label">Formula:</span> <span class="lstm-walkthrough__formula"></span></p>
<p><span class="lstm-walkthrough__label">Numbers:</span> <span class="lstm-walkthrough__plugged"></span></p>
<p><span class="lstm-walkthrough__label">Result:</span> <span class="lstm-walkthrough__result"></span></p>
</div>
<div class="lstm-walkthrough__diagram" role="img" aria-label="" style="--boxes: {len(boxes)}">
{diagram}
</div>
<div class="lstm-walkthrough__controls">
<button type="button" class="md-button" data-action="previous">Previous</button>
<button type="button" class="md-button md-button--primary" data-action="play">Play</button>
<button type="button" class="md-button" data-action="next">Next</button>
</div>
</div>
<div class="lstm-walkthrough__scroll">
<table class="lstm-walkthrough__table">
<caption>Every step of the update, on one unit of the LSTM's state. z_f, z_i, z_g, z_o are the gates'
pre-activations (weights times x_t and h_prev, plus biases). Every number is computed by lessonlib's LSTM cell
and shown to three decimals, so a sum of rounded products can differ from its result in the last digit.</caption>
<thead><tr><th scope="col">Step</th><th scope="col">Formula</th><th scope="col">Numbers plugged in</th>
<th scope="col">Result</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</div>
</div>"""


def _narrow(text: str) -> str:
    """Escaped text that may also wrap after a product's dot, so the table fits a phone."""
    return html.escape(text).replace("·", "·<wbr>")


def _box(step: int, name: str, value: float, scale: float) -> str:
    """One value of the diagram, with a bar from zero to the value on a [-scale, scale] axis."""
    zero, end = 50.0, 50.0 + 50.0 * value / scale
    left, right = min(zero, end), 100.0 - max(zero, end)
    grows_from = "left" if value >= 0 else "right"  # the bar grows out of zero when revealed
    bar = f"left: {left:.1f}%; right: {right:.1f}%; transform-origin: {grows_from}"
    return (
        f'<div class="lstm-walkthrough__box" data-step="{step}">'
        f'<span class="lstm-walkthrough__symbol">{html.escape(name)}</span> '
        f'<span class="lstm-walkthrough__value">{number(value)}</span>'
        f'<span class="lstm-walkthrough__bar"><span style="{bar}"></span></span></div>'
    )

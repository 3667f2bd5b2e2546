"""The LSTM walkthrough widget: its numbers against the cell's weights, and its markup."""
import json
from dataclasses import asdict
from html.parser import HTMLParser

import pytest
import torch
from torch.testing import assert_close

from lessonlib.figures.walkthrough import (
    HIDDEN_SIZE,
    Step,
    lstm_walkthrough_steps,
    number,
    walkthrough_example,
    walkthrough_html,
)

F64 = torch.float64


def recompute(seed: int, device) -> dict[str, torch.Tensor]:
    """The example's last step straight from the weights (gate order i, f, g, o), all units."""
    lstm, inputs = walkthrough_example(seed, device)
    h = c = torch.zeros(HIDDEN_SIZE, dtype=F64, device=device)
    for x in inputs[:, 0]:
        z = lstm.weight_ih_l0 @ x + lstm.bias_ih_l0 + lstm.weight_hh_l0 @ h + lstm.bias_hh_l0
        z_i, z_f, z_g, z_o = z.detach().chunk(4)
        h_prev, c_prev = h, c
        i, f, g, o = torch.sigmoid(z_i), torch.sigmoid(z_f), torch.tanh(z_g), torch.sigmoid(z_o)
        c = f * c + i * g
        h = o * torch.tanh(c)
    return dict(x_t=inputs[-1, 0], h_prev=h_prev, c_prev=c_prev, z_f=z_f, z_i=z_i, z_g=z_g, z_o=z_o,
                f=f, i=i, g=g, o=o, c=c, h=h)


@pytest.mark.parametrize("coordinate", range(HIDDEN_SIZE))
def test_numbers_are_the_cells(coordinate, device):
    steps = lstm_walkthrough_steps(seed=1, coordinate=coordinate, device=device)
    assert [s.title for s in steps] == ["State carried in", "Forget gate", "Input gate and candidate",
                                        "New cell value", "Output gate", "New hidden value"]
    expected = {name: t[coordinate].item() for name, t in recompute(1, device).items() if name != "x_t"}
    shown = {name: v for s in steps for name, v in {**s.results, **s.preactivations}.items()}
    assert shown.keys() == expected.keys()
    assert_close(shown, expected, rtol=1e-12, atol=1e-12)
    # the update's two equations hold exactly on the published numbers, on the same device
    t = {name: torch.tensor(v, dtype=F64, device=device) for name, v in shown.items()}
    assert t["c"].item() == (t["f"] * t["c_prev"] + t["i"] * t["g"]).item()
    assert t["h"].item() == (t["o"] * torch.tanh(t["c"])).item()
    assert all(number(x) in steps[0].plugged for x in recompute(1, device)["x_t"].tolist())


def test_example_is_interesting_and_leaves_the_global_stream_alone():
    torch.manual_seed(0)
    expected_draw = torch.rand(3)
    torch.manual_seed(0)
    steps = lstm_walkthrough_steps()
    assert torch.equal(torch.rand(3), expected_draw)
    values = {name: v for s in steps for name, v in s.results.items()}
    assert values["f"] > 0.9  # the opened forget gate keeps most of the memory
    assert abs(values["c_prev"]) > 0.5  # ...and there is memory to keep


def test_coordinate_out_of_range():
    with pytest.raises(ValueError, match="coordinate"):
        lstm_walkthrough_steps(coordinate=HIDDEN_SIZE)


class Widget(HTMLParser):
    """What a test needs from the markup: elements' attributes, table rows, button labels."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.buttons: list[str] = []
        self._text: list[str] | None = None
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag == "tr" and "data-step" in dict(attrs):
            self.rows.append([])
        if tag in ("th", "td", "button"):
            self._text = []

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._text is not None and self.rows:
            self.rows[-1].append("".join(self._text))
        elif tag == "button":
            self.buttons.append("".join(self._text).strip())
        self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def with_class(self, name: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if name in (a.get("class") or "").split()]


def test_markup_table_controls_and_data():
    steps = lstm_walkthrough_steps()
    markup = walkthrough_html(steps)
    assert all(line.strip() for line in markup.splitlines())  # one HTML block for Markdown
    widget = Widget(markup)
    assert widget.rows == [[f"{n + 1}. {s.title}", s.formula, s.plugged, s.result] for n, s in enumerate(steps)]
    for row, step in zip(widget.rows, steps):
        assert all(number(v) in row[2] for v in step.preactivations.values())
        assert all(number(v) in row[3] for v in step.results.values())
    assert widget.buttons == ["Previous", "Play", "Next"]
    assert all(a.get("type") == "button" for tag, a in widget.elements if tag == "button")
    assert "hidden" in widget.with_class("lstm-walkthrough__player")[0]  # no dead controls without JS
    assert [a.get("aria-live") for _, a in widget.elements if "aria-live" in a] == ["polite"]
    assert widget.with_class("lstm-walkthrough__diagram")[0]["role"] == "img"
    (root,) = widget.with_class("lstm-walkthrough")
    assert json.loads(root["data-steps"]) == [{**asdict(s), "result": s.result} for s in steps]


def test_markup_escapes_text():
    sneaky = '<script>alert("x")</script> & \'co\''
    markup = walkthrough_html([Step(sneaky, "a < b", "1 & 2", {"x": 0.5})])
    assert "<script" not in markup and "a < b" not in markup
    widget = Widget(markup)
    assert widget.rows == [[f"1. {sneaky}", "a < b", "1 & 2", "x = 0.500"]]
    assert json.loads(widget.with_class("lstm-walkthrough")[0]["data-steps"])[0]["title"] == sneaky

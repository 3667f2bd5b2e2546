"""lessonlib.export: the weights the language-model page publishes for the browser round-trip exactly."""
from __future__ import annotations

import json

import pytest
import torch

from lessonlib import export
from lessonlib.experiments import language_model as lm

VOCAB = list("\n abcdefghij")


@pytest.mark.parametrize("name", ["lstm", "gpt"])
def test_the_tensors_round_trip_exactly(name):
    model = lm.build(name, len(VOCAB), seed=3)
    files = export.export(name, model, VOCAB)
    (manifest_name, manifest), (weights_name, weights) = files.items()
    m = json.loads(manifest)
    assert m["weights"] == weights_name and m["vocab"] == VOCAB and m["kind"] == name
    assert manifest_name.startswith(f"{name}-") and manifest_name.endswith(".json")
    assert export.content_name(name, weights, "bin") == weights_name, "named by its content"
    assert len(weights) == 4 * sum(p.numel() for p in model.state_dict().values())
    back = export.load(manifest, weights)
    assert list(back) == list(model.state_dict())
    for key, tensor in model.state_dict().items():
        assert back[key].dtype == torch.float32 and torch.equal(back[key], tensor), key
    offsets = [e["offset"] for e in m["tensors"]]
    assert offsets == sorted(offsets) and all(o % 4 == 0 for o in offsets)
    tokens = [[0, 1, 2, 3], [5]]
    assert export.reference(export.reloaded(model, files), tokens) == export.reference(model, tokens)


def test_the_reference_holds_every_position():
    model = lm.build("gpt", len(VOCAB), seed=0)
    data = json.loads(export.reference_json({"gpt": model}, VOCAB, ["ab", "\nj c"]))
    logits = data["logits"]["gpt"]
    assert [len(p) for p in logits] == [2, 4] and all(len(row) == len(VOCAB) for p in logits for row in p)


def test_other_models_are_refused():
    with pytest.raises(ValueError, match="LSTM and the GPT"):
        export.config(lm.build("rnn", len(VOCAB)))
    with pytest.raises(ValueError, match="not a lessonlib-weights-1"):
        export.load(b'{"format": "x"}', b"")

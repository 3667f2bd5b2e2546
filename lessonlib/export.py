"""A trained language model's weights, in a form a web page can read without a framework.

The language-model lesson publishes each of its models beside the page (lessonlib.publish), and
docs/javascripts/char-models.js reads them and runs the same forward pass in the reader's browser.
The format is two files per model:

- weights: every tensor of the model's state_dict as float32, little-endian, one after another
  in the manifest's order, nothing between them (so each starts at a multiple of 4 bytes);
- manifest (JSON): {"format": "lessonlib-weights-1", "kind": "lstm" | "gpt", "config": {...},
  "vocab": [every character, in id order], "weights": the weights file's name,
  "tensors": [{"name", "shape", "offset" (bytes), "length" (numbers)}, ...]}.

A tensor is named as in the state_dict ("rnn.weight_ih_l0", "transformer.blocks.0.norm1.weight"),
which is also the name the JavaScript gives it. Each file's name ends with a short sha256 of its
bytes, as the page's figures do, so a changed model is a new address and no cache serves an old one.

`reference` computes, with PyTorch, the logits of the exported tensors at every position of
some prompts: the numbers the browser test holds the JavaScript to.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

FORMAT = "lessonlib-weights-1"


def content_name(stem: str, data: bytes, suffix: str) -> str:
    """'stem-<first 12 hex digits of sha256(data)>.suffix': a name that changes with the bytes."""
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}.{suffix}"


def pack(tensors: dict[str, Tensor]) -> tuple[list[dict], bytes]:
    """The tensors as one float32 little-endian blob, and where each one lies in it."""
    entries, parts, offset = [], [], 0
    for name, tensor in tensors.items():
        array = tensor.detach().cpu().to(torch.float32).contiguous().numpy().astype("<f4", copy=False)
        data = array.tobytes()
        entries.append({"name": name, "shape": list(array.shape), "offset": offset, "length": int(array.size)})
        parts.append(data)
        offset += len(data)
    return entries, b"".join(parts)


def unpack(entries: Sequence[dict], data: bytes) -> dict[str, Tensor]:
    """pack's inverse: each tensor, float32, of its shape (copied out of `data`)."""
    out = {}
    for e in entries:
        array = np.frombuffer(data, dtype="<f4", count=e["length"], offset=e["offset"])
        out[e["name"]] = torch.from_numpy(array.copy()).reshape(e["shape"])
    return out


def config(model: nn.Module) -> dict:
    """What the JavaScript needs besides the tensors: the model's kind and sizes."""
    from lessonlib.models.char_rnn import CharRNN
    from lessonlib.models.char_transformer import CharTransformer

    if isinstance(model, CharRNN):
        if model.kind != "lstm":
            raise ValueError(f"the browser runs the LSTM and the GPT, not {model.kind!r}")
        return {"kind": "lstm", "embedding": model.embed.embedding_dim, "hidden": model.rnn.hidden_size}
    if isinstance(model, CharTransformer):
        t = model.transformer
        if t.project is not None or not t.causal:
            raise ValueError("the browser runs a causal CharTransformer without an input projection")
        return {"kind": "gpt", "d_model": model.embed.embedding_dim, "heads": t.blocks[0].self_attn.heads,
                "layers": len(t.blocks), "context": model.context, "d_ff": t.blocks[0].linear1.out_features}
    raise ValueError(f"cannot export a {type(model).__name__}")


def export(stem: str, model: nn.Module, vocab: Sequence[str]) -> dict[str, bytes]:
    """{manifest name: manifest, weights name: weights}, both named by content. The manifest
    names the weights file, so its own name covers the weights too."""
    cfg = config(model)
    entries, blob = pack(model.state_dict())
    weights = content_name(stem, blob, "bin")
    manifest = {"format": FORMAT, "kind": cfg["kind"], "config": cfg, "vocab": list(vocab),
                "weights": weights, "tensors": entries}
    text = json.dumps(manifest, indent=1).encode()
    return {content_name(stem, text, "json"): text, weights: blob}


def load(manifest: bytes | str, weights: bytes) -> dict[str, Tensor]:
    """The state_dict a manifest and its weights file hold."""
    m = json.loads(manifest)
    if m.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} manifest")
    return unpack(m["tensors"], weights)


def reloaded(model: nn.Module, files: dict[str, bytes]) -> nn.Module:
    """A copy of `model` holding exactly the tensors of `files` (export's output)."""
    import copy

    manifest = next(data for name, data in files.items() if name.endswith(".json"))
    copied = copy.deepcopy(model).cpu()
    copied.load_state_dict(load(manifest, files[json.loads(manifest)["weights"]]))
    return copied.eval()


@torch.no_grad()
def reference(model: nn.Module, tokens: Sequence[Sequence[int]]) -> list[list[list[float]]]:
    """For each prompt (a list of ids), the logits (T, V) at every position, read from an empty
    state in one forward pass, as Python floats (float32 values, exactly)."""
    model = model.eval()
    return [model(torch.tensor([list(ids)]))[0][0].tolist() for ids in tokens]


def reference_json(models: dict[str, nn.Module], vocab: Sequence[str], prompts: Sequence[str]) -> bytes:
    """{"prompts": [...], "logits": {name: [prompt][position][id]}}: what PyTorch computes from the
    exported tensors (the models are loaded back from their exported bytes first)."""
    ids = {c: i for i, c in enumerate(vocab)}
    tokens = [[ids[c] for c in p] for p in prompts]
    logits = {name: reference(model, tokens) for name, model in models.items()}
    return json.dumps({"prompts": list(prompts), "logits": logits}).encode()

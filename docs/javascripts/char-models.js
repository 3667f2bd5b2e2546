/* The language-model lesson's LSTM and small GPT, run in the reader's browser.

   The weights are the trained models' own, exported at build (lessonlib/export.py): a JSON
   manifest (tensor names, shapes, byte offsets, the vocabulary) and one float32 file. Each tensor
   keeps its PyTorch name ("rnn.weight_ih_l0", "transformer.blocks.0.norm1.weight"), and each
   function below follows the Python it repeats, with its shapes in the comments:
   lessonlib/models/char_rnn.py (torch's nn.LSTM), lessonlib/models/char_transformer.py,
   transformer.py and multihead.py. Numbers are stored as float32 and computed in float64.
   tests/test_browser_model.py holds the logits to PyTorch's, within 1e-4.

   The widget (markup: lessonlib/figures/browser_model.py) is progressive: without this script,
   or if the weights fail to load, the samples the build wrote stand in. */
(function () {
  "use strict";

  // ---- loading -------------------------------------------------------------------------------

  async function load(manifestUrl) {
    // manifest + weights -> {kind, config, vocab, ids, t: {name: {data: Float32Array, shape}}}
    const got = await fetch(manifestUrl);
    if (!got.ok) throw new Error(`${manifestUrl}: HTTP ${got.status}`);
    const manifest = await got.json();
    if (manifest.format !== "lessonlib-weights-1") throw new Error(`${manifestUrl}: not a weights manifest`);
    const weightsUrl = new URL(manifest.weights, new URL(manifestUrl, location.href)).href;
    const bin = await fetch(weightsUrl);
    if (!bin.ok) throw new Error(`${manifest.weights}: HTTP ${bin.status}`);
    const buffer = await bin.arrayBuffer();
    const t = {};
    for (const e of manifest.tensors) {
      if (e.offset + 4 * e.length > buffer.byteLength) throw new Error(`${manifest.weights}: too short`);
      t[e.name] = { data: new Float32Array(buffer, e.offset, e.length), shape: e.shape };
    }
    const ids = new Map(manifest.vocab.map((c, i) => [c, i]));
    return { kind: manifest.kind, config: manifest.config, vocab: manifest.vocab, ids, t,
             bytes: buffer.byteLength + JSON.stringify(manifest).length };
  }

  // ---- shared pieces -------------------------------------------------------------------------

  function linear(W, b, x, outSize, inSize, xOffset = 0) {
    // nn.Linear: W (out, in), b (out,), x (in,) -> W x + b (out,)
    const y = new Float64Array(outSize);
    for (let o = 0; o < outSize; o++) {
      let s = b ? b[o] : 0;
      const row = o * inSize;
      for (let i = 0; i < inSize; i++) s += W[row + i] * x[xOffset + i];
      y[o] = s;
    }
    return y;
  }

  const sigmoid = (z) => 1 / (1 + Math.exp(-z));

  function erf(x) {
    // Numerical Recipes' erfc (fractional error below 1.2e-7): enough for F.gelu within 1e-4
    const z = Math.abs(x);
    const t = 1 / (1 + 0.5 * z);
    const r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
      t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
      t * 0.17087277)))))))));
    return x >= 0 ? 1 - r : r - 1;
  }

  const gelu = (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)); // F.gelu's default: the exact, erf form

  function layerNorm(x, weight, bias, eps = 1e-5) {
    // nn.LayerNorm(d): (d,) -> (d,), mean and (biased) variance over the d features
    const d = x.length;
    let mean = 0;
    for (let i = 0; i < d; i++) mean += x[i];
    mean /= d;
    let variance = 0;
    for (let i = 0; i < d; i++) variance += (x[i] - mean) ** 2;
    variance /= d;
    const inv = 1 / Math.sqrt(variance + eps);
    const y = new Float64Array(d);
    for (let i = 0; i < d; i++) y[i] = (x[i] - mean) * inv * weight[i] + bias[i];
    return y;
  }

  // ---- the LSTM: CharRNN("lstm"), torch's nn.LSTM, one character at a time -----------------------

  function lstmState(model) {
    // state (h, c), each (H,): zeros, as CharRNN's state=None
    const H = model.config.hidden;
    return { h: new Float64Array(H), c: new Float64Array(H) };
  }

  function lstmStep(model, state, token, wantLogits = true) {
    // one character: token -> embed (E,) -> nn.LSTM step (h, c each (H,)) -> head (V,)
    const { t } = model, E = model.config.embedding, H = model.config.hidden, V = model.vocab.length;
    const x = t["embed.weight"].data.subarray(token * E, (token + 1) * E); // (E,)
    // gates (4H,) = W_ih x + b_ih + W_hh h + b_hh: torch's two biases, rows in the order i, f, g, o
    const gates = linear(t["rnn.weight_ih_l0"].data, t["rnn.bias_ih_l0"].data, x, 4 * H, E);
    const recurrent = linear(t["rnn.weight_hh_l0"].data, t["rnn.bias_hh_l0"].data, state.h, 4 * H, H);
    const h = new Float64Array(H), c = new Float64Array(H);
    for (let j = 0; j < H; j++) {
      const i = sigmoid(gates[j] + recurrent[j]); // input gate
      const f = sigmoid(gates[H + j] + recurrent[H + j]); // forget gate
      const g = Math.tanh(gates[2 * H + j] + recurrent[2 * H + j]); // candidate
      const o = sigmoid(gates[3 * H + j] + recurrent[3 * H + j]); // output gate
      c[j] = f * state.c[j] + i * g; // c_t = f * c_{t-1} + i * g
      h[j] = o * Math.tanh(c[j]); // h_t = o * tanh(c_t)
    }
    const logits = wantLogits ? linear(t["head.weight"].data, t["head.bias"].data, h, V, H) : null; // (V,)
    return { state: { h, c }, logits };
  }

  // ---- the GPT: CharTransformer, one position at a time through a KV cache ---------------------

  function gptCache(model) {
    // one KVCache per block: keys and values of every position read so far, each (n, d)
    return model.blocksIndex.map(() => ({ keys: [], values: [] }));
  }

  function gptStep(model, caches, token, wantAttention = false) {
    // CharTransformer.stream for one token: position n = len(caches[0]) -> logits (V,)
    const { t } = model, cfg = model.config, d = cfg.d_model, heads = cfg.heads, dHead = d / heads;
    const V = model.vocab.length, pos = caches[0].keys.length;
    if (pos >= cfg.context) throw new Error(`the model reads at most ${cfg.context} characters`);
    // x (d,) = embed(token) + LearnedPositions(pos)
    const x = new Float64Array(d);
    const emb = t["embed.weight"].data, P = t["transformer.positions.weight"].data;
    for (let i = 0; i < d; i++) x[i] = emb[token * d + i] + P[pos * d + i];
    const attention = [];
    for (const b of model.blocksIndex) {
      const p = `transformer.blocks.${b}.`;
      // x = x + MultiHeadAttention(norm1(x)), causal: this position reads itself and every earlier one
      const a = layerNorm(x, t[p + "norm1.weight"].data, t[p + "norm1.bias"].data); // (d,)
      const qkv = linear(t[p + "self_attn.in_proj_weight"].data, t[p + "self_attn.in_proj_bias"].data, a, 3 * d, d);
      const q = qkv.subarray(0, d), k = qkv.slice(d, 2 * d), v = qkv.slice(2 * d, 3 * d); // each (d,)
      caches[b].keys.push(k); // KVCache.extend: (n + 1, d)
      caches[b].values.push(v);
      const keys = caches[b].keys, values = caches[b].values, n = keys.length;
      const context = new Float64Array(d); // merge_heads of (heads, d_head)
      const weightsByHead = [];
      for (let h = 0; h < heads; h++) {
        // split_heads: head h reads features h * d_head .. (h + 1) * d_head - 1
        const lo = h * dHead, scores = new Float64Array(n);
        let max = -Infinity;
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let i = 0; i < dHead; i++) s += q[lo + i] * keys[j][lo + i];
          scores[j] = s / Math.sqrt(dHead); // q . k / sqrt(d_head)
          if (scores[j] > max) max = scores[j];
        }
        let total = 0;
        for (let j = 0; j < n; j++) total += (scores[j] = Math.exp(scores[j] - max));
        for (let j = 0; j < n; j++) {
          scores[j] /= total; // softmax over the keys: weights (n,)
          for (let i = 0; i < dHead; i++) context[lo + i] += scores[j] * values[j][lo + i];
        }
        weightsByHead.push(scores);
      }
      if (wantAttention) attention.push(weightsByHead);
      const attended = linear(t[p + "self_attn.out_proj.weight"].data, t[p + "self_attn.out_proj.bias"].data,
                              context, d, d);
      for (let i = 0; i < d; i++) x[i] += attended[i]; // residual
      // x = x + linear2(gelu(linear1(norm2(x)))): d -> d_ff -> d
      const m = layerNorm(x, t[p + "norm2.weight"].data, t[p + "norm2.bias"].data);
      const wide = linear(t[p + "linear1.weight"].data, t[p + "linear1.bias"].data, m, cfg.d_ff, d); // (d_ff,)
      for (let i = 0; i < cfg.d_ff; i++) wide[i] = gelu(wide[i]);
      const narrow = linear(t[p + "linear2.weight"].data, t[p + "linear2.bias"].data, wide, d, cfg.d_ff);
      for (let i = 0; i < d; i++) x[i] += narrow[i]; // residual
    }
    const out = layerNorm(x, t["transformer.norm.weight"].data, t["transformer.norm.bias"].data); // final LayerNorm
    return { logits: linear(t["head.weight"].data, t["head.bias"].data, out, V, d), attention };
  }

  // ---- what the test and the widget call --------------------------------------------------------

  function prepare(model) {
    if (model.kind === "gpt") model.blocksIndex = [...Array(model.config.layers).keys()];
    return model;
  }

  function logits(model, tokens) {
    // tokens (T,) read from an empty state -> logits (T, V) at every position, as model(tokens)
    const rows = [];
    if (model.kind === "lstm") {
      let state = lstmState(model);
      for (const token of tokens) {
        const step = lstmStep(model, state, token);
        state = step.state;
        rows.push(Array.from(step.logits));
      }
    } else {
      const caches = gptCache(model);
      for (const token of tokens) rows.push(Array.from(gptStep(model, caches, token).logits));
    }
    return rows;
  }

  function encode(model, text) {
    // text -> {tokens, skipped}: characters outside the vocabulary are skipped, and listed
    const tokens = [], skipped = [];
    for (const ch of text) {
      const id = model.ids.get(ch);
      if (id === undefined) skipped.push(ch);
      else tokens.push(id);
    }
    return { tokens, skipped };
  }

  function distribution(logitsRow, temperature, topK) {
    // next_token's draw: logits / temperature, the top k kept, softmax -> probabilities (V,)
    const V = logitsRow.length, k = Math.max(1, Math.min(V, Math.round(topK) || V));
    const order = [...logitsRow.keys()].sort((a, b) => logitsRow[b] - logitsRow[a]);
    const probs = new Float64Array(V);
    const max = logitsRow[order[0]] / temperature;
    let total = 0;
    for (let r = 0; r < k; r++) total += (probs[order[r]] = Math.exp(logitsRow[order[r]] / temperature - max));
    for (let r = 0; r < k; r++) probs[order[r]] /= total;
    return { probs, order };
  }

  function draw(probs) {
    let u = Math.random(), last = 0;
    for (let i = 0; i < probs.length; i++) {
      if (probs[i] > 0) last = i;
      u -= probs[i];
      if (u < 0) return i;
    }
    return last;
  }

  window.lessonlibCharModels = { load: async (url) => prepare(await load(url)), logits, encode, distribution,
                                 lstmState, lstmStep, gptCache, gptStep };

  // ---- the widget ----------------------------------------------------------------------------------

  const LSTM_LIMIT = 2000; // characters the LSTM reads: the prompt's last 2,000

  function shown(ch) {
    if (ch === "\n") return "newline";
    if (ch === " ") return "space";
    const code = ch.codePointAt(0);
    if (code < 32 || code === 127) return `U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
    return ch;
  }

  function setUp(root) {
    if (root.dataset.charModelReady || root.dataset.charModelLoading) return;
    root.dataset.charModelLoading = "true";
    const $ = (s) => root.querySelector(s);
    const live = $(".char-model__live"), error = $(".char-model__error"), status = $(".char-model__status");
    const prompt = $(".char-model__prompt"), note = $(".char-model__note"), bars = $(".char-model__bars");
    const tbody = $(".char-model__table tbody"), temperature = $(".char-model__temperature");
    const temperatureValue = $(".char-model__temperature-value"), topK = $(".char-model__top-k");
    const write = $(".char-model__write"), written = $(".char-model__written");
    const radios = [...root.querySelectorAll('input[name="char-model-kind"]')];
    const urls = JSON.parse(root.dataset.models);

    let models = null, job = null, generation = 0;
    const lstmCache = { tokens: [], states: [] }; // states[i]: after reading tokens[0..i]

    const kind = () => radios.find((r) => r.checked).value;

    function lstmLogits(model, tokens) {
      // resume from the longest prefix read before: typing at the end costs one step per character
      let same = 0;
      while (same < tokens.length && same < lstmCache.tokens.length && tokens[same] === lstmCache.tokens[same]) same++;
      lstmCache.tokens.length = same;
      lstmCache.states.length = same;
      let state = same ? lstmCache.states[same - 1] : lstmState(model), out = null;
      for (let i = same; i < tokens.length; i++) {
        const step = lstmStep(model, state, tokens[i], i === tokens.length - 1);
        state = step.state;
        lstmCache.tokens.push(tokens[i]);
        lstmCache.states.push(state);
        out = step.logits;
      }
      if (!out) out = linear(model.t["head.weight"].data, model.t["head.bias"].data, state.h,
                             model.vocab.length, model.config.hidden);
      return { logits: out, state };
    }

    function read() {
      // the prompt as the chosen model reads it: {tokens, notes}
      const model = models[kind()];
      const text = prompt.value, { tokens, skipped } = encode(model, text);
      const notes = [];
      if (skipped.length) {
        const unique = [...new Set(skipped)].slice(0, 5).map(shown).join(", ");
        notes.push(`Skipped ${skipped.length} character${skipped.length > 1 ? "s" : ""} the model has never seen (${unique}).`);
      }
      const limit = kind() === "gpt" ? model.config.context : LSTM_LIMIT;
      if (tokens.length > limit) {
        notes.push(kind() === "gpt"
          ? `The transformer reads the last ${limit} of these ${tokens.length.toLocaleString("en")} characters, its context.`
          : `The LSTM reads the last ${limit.toLocaleString("en")} of these ${tokens.length.toLocaleString("en")} characters.`);
      }
      return { model, tokens: tokens.slice(-limit), notes };
    }

    function nextLogits(model, tokens) {
      if (model.kind === "lstm") return lstmLogits(model, tokens).logits;
      const caches = gptCache(model);
      let out = null;
      for (const token of tokens) out = gptStep(model, caches, token).logits;
      return out;
    }

    function predict(announce) {
      const { model, tokens, notes } = read();
      note.textContent = notes.join(" ");
      bars.replaceChildren();
      tbody.replaceChildren();
      if (!tokens.length) {
        note.textContent = (note.textContent + " Type at least one character the model knows.").trim();
        if (announce) status.textContent = note.textContent;
        return;
      }
      const { probs, order } = distribution(nextLogits(model, tokens), Number(temperature.value), Number(topK.value));
      const top = order.slice(0, 10);
      for (const id of top) {
        const label = shown(model.vocab[id]), p = probs[id];
        const row = document.createElement("div");
        row.className = "char-model__bar";
        row.innerHTML = '<span class="char-model__char"></span><span class="char-model__track">' +
          '<span class="char-model__fill"></span></span><span class="char-model__p"></span>';
        row.children[0].textContent = label;
        row.querySelector(".char-model__fill").style.width = `${(100 * p).toFixed(1)}%`;
        row.children[2].textContent = `${(100 * p).toFixed(1)}%`;
        bars.append(row);
        const tr = document.createElement("tr");
        tr.innerHTML = "<td></td><td></td>";
        tr.children[0].textContent = label;
        tr.children[1].textContent = `${(100 * p).toFixed(1)}%`;
        tbody.append(tr);
      }
      root.dataset.top = shown(model.vocab[top[0]]);
      if (announce) {
        const name = model.kind === "gpt" ? "Transformer" : "LSTM";
        status.textContent = `${name}: most likely next character ${shown(model.vocab[top[0]])}, ` +
          `${(100 * probs[top[0]]).toFixed(0)}%; then ${top.slice(1, 3).map((i) => shown(model.vocab[i])).join(", ")}.` +
          (notes.length ? ` ${notes.join(" ")}` : "");
      }
    }

    function schedule(announce) {
      // the latest change only: a pending prediction or writing is dropped, never queued
      generation++;
      if (job) clearTimeout(job);
      job = setTimeout(() => { job = null; predict(announce); }, 0);
    }

    function writeText() {
      const mine = ++generation;
      if (job) clearTimeout(job);
      job = null;
      const { model, tokens } = read();
      if (!tokens.length) return predict(true);
      const tau = Number(temperature.value), k = Number(topK.value);
      const out = [];
      let state = null, caches = null, recent = tokens.slice(-(model.config.context || LSTM_LIMIT));
      let logitsRow = null;
      if (model.kind === "lstm") ({ logits: logitsRow, state } = lstmLogits(model, tokens));
      else {
        caches = gptCache(model);
        for (const token of recent) logitsRow = gptStep(model, caches, token).logits;
      }
      written.hidden = false;
      written.textContent = "";
      status.textContent = "Writing 200 characters…";
      const chunk = () => {
        if (mine !== generation) return; // the prompt or a knob changed: this writing is stale
        for (let n = 0; n < 20 && out.length < 200; n++) {
          const id = draw(distribution(logitsRow, tau, k).probs);
          out.push(id);
          if (model.kind === "lstm") ({ logits: logitsRow, state } = lstmStep(model, state, id));
          else {
            recent.push(id);
            if (recent.length > model.config.context) {
              // the window slides: positions change, so the cache no longer applies; reread the window
              recent = recent.slice(-model.config.context);
              caches = gptCache(model);
              for (const token of recent) logitsRow = gptStep(model, caches, token).logits;
            } else logitsRow = gptStep(model, caches, id).logits;
          }
        }
        written.textContent = out.map((i) => model.vocab[i]).join("");
        if (out.length < 200) setTimeout(chunk, 0);
        else status.textContent = `Wrote 200 characters at temperature ${tau}, top-k ${k}.`;
      };
      setTimeout(chunk, 0);
    }

    Promise.all(["lstm", "gpt"].map((name) => window.lessonlibCharModels.load(new URL(urls[name], location.href).href)))
      .then(([lstm, gpt]) => {
        models = { lstm, gpt };
        prompt.addEventListener("input", () => schedule(true));
        radios.forEach((r) => r.addEventListener("change", () => schedule(true)));
        temperature.addEventListener("input", () => {
          temperatureValue.textContent = Number(temperature.value).toFixed(1);
          schedule(true);
        });
        topK.addEventListener("input", () => schedule(true));
        write.addEventListener("click", writeText);
        live.hidden = false;
        predict(false);
        root.dataset.firstPredictionMs = performance.now().toFixed(0); // since navigation began (the benchmark reads it)
        root.dataset.charModelReady = "true";
      })
      .catch((e) => {
        error.hidden = false;
        error.textContent = `The live models could not be loaded (${e.message}); the samples above stand in.`;
        root.dataset.charModelReady = "failed";
      });
  }

  lessonlibOnPageView(() => document.querySelectorAll(".char-model").forEach(setUp));
})();

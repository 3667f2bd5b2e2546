/* The language-model lesson's LSTM and small GPT, run in the reader's browser.

   The weights are the trained models' own, exported at build (lessonlib/export.py): a JSON
   manifest (tensor names, shapes, byte offsets, the vocabulary) and one float32 file. Each tensor
   keeps its PyTorch name ("rnn.weight_ih_l0", "transformer.blocks.0.norm1.weight"), and each
   function below follows the Python it repeats, with its shapes in the comments:
   lessonlib/models/char_rnn.py (torch's nn.LSTM), lessonlib/models/char_transformer.py,
   transformer.py and multihead.py. Numbers are stored as float32 and computed in float64.
   tests/test_browser_model.py holds the logits to PyTorch's, within 1e-4.

   Speed (scripts/bench_browser_model.py measures it): every buffer a step writes is allocated
   once per model, in prepare(), and reused; the LSTM's input-to-gate products are a table, one row
   per character; the GPT reads a whole window in one pass (gptForward), matrix by matrix. In the
   widget, a key typed at the end of a 10,000-character prompt is one LSTM step and one more span
   of shading, not a reread and a redraw of the prompt (16 ms at most, benchmarked).

   The widget (markup: lessonlib/figures/browser_model.py) is progressive: without this script,
   or if the weights fail to load, the samples and the figure the build wrote stand in. */
(function () {
  "use strict";

  const stats = { steps: 0 }; // positions read by a forward pass, LSTM and GPT: the fast-typing test counts them

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
    return { kind: manifest.kind, config: manifest.config, vocab: manifest.vocab, ids, t };
  }

  const loads = new Map(); // url -> the promise of its prepared model: each model is fetched once per page
  function loadOnce(url) {
    const href = new URL(url, location.href).href;
    if (!loads.has(href)) loads.set(href, load(href).then(prepare));
    return loads.get(href);
  }

  // ---- shared pieces -------------------------------------------------------------------------

  function linear(W, b, X, rows, outSize, inSize, Y) {
    // nn.Linear over rows: W (out, in), b (out,), X (rows, in) -> Y (rows, out) = X W^T + b
    // One weight row against four input rows at a time: each weight read once serves four sums
    for (let o = 0; o < outSize; o++) {
      const w = o * inSize, bias = b ? b[o] : 0;
      let r = 0;
      for (; r + 4 <= rows; r += 4) {
        const x0 = r * inSize, x1 = x0 + inSize, x2 = x1 + inSize, x3 = x2 + inSize;
        let s0 = bias, s1 = bias, s2 = bias, s3 = bias;
        for (let i = 0; i < inSize; i++) {
          const v = W[w + i];
          s0 += v * X[x0 + i];
          s1 += v * X[x1 + i];
          s2 += v * X[x2 + i];
          s3 += v * X[x3 + i];
        }
        Y[r * outSize + o] = s0;
        Y[(r + 1) * outSize + o] = s1;
        Y[(r + 2) * outSize + o] = s2;
        Y[(r + 3) * outSize + o] = s3;
      }
      for (; r < rows; r++) {
        const x = r * inSize;
        let s = bias;
        for (let i = 0; i < inSize; i++) s += W[w + i] * X[x + i];
        Y[r * outSize + o] = s;
      }
    }
    return Y;
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

  function layerNorm(X, rows, d, weight, bias, Y, eps = 1e-5) {
    // nn.LayerNorm(d) over rows: X (rows, d) -> Y (rows, d), mean and (biased) variance over the d features
    for (let r = 0; r < rows; r++) {
      const at = r * d;
      let mean = 0;
      for (let i = 0; i < d; i++) mean += X[at + i];
      mean /= d;
      let variance = 0;
      for (let i = 0; i < d; i++) variance += (X[at + i] - mean) ** 2;
      variance /= d;
      const inv = 1 / Math.sqrt(variance + eps);
      for (let i = 0; i < d; i++) Y[at + i] = (X[at + i] - mean) * inv * weight[i] + bias[i];
    }
    return Y;
  }

  // ---- the LSTM: CharRNN("lstm"), torch's nn.LSTM, one character at a time -----------------------

  function lstmState(model) {
    // state (h, c), each (H,): zeros, as CharRNN's state=None
    const H = model.config.hidden;
    return { h: new Float64Array(H), c: new Float64Array(H) };
  }

  function lstmStep(model, state, token, wantLogits = true) {
    // one character: token -> embed (E,) -> nn.LSTM step, the state (h, c each (H,)) updated in place -> head (V,)
    const { t, work } = model, H = model.config.hidden;
    // gates (4H,) = W_ih x + b_ih + W_hh h + b_hh: torch's two biases, rows in the order i, f, g, o;
    // W_ih x + b_ih + b_hh was computed once per character (prepare: inputGates (V, 4H))
    const gates = work.gates;
    gates.set(work.inputGates.subarray(token * 4 * H, (token + 1) * 4 * H));
    const Whh = t["rnn.weight_hh_l0"].data, hPrev = state.h;
    for (let o = 0; o < 4 * H; o += 4) { // four gate rows at a time, as linear: each h_{t-1}[i] read serves four
      const w0 = o * H, w1 = w0 + H, w2 = w1 + H, w3 = w2 + H;
      let s0 = gates[o], s1 = gates[o + 1], s2 = gates[o + 2], s3 = gates[o + 3];
      for (let i = 0; i < H; i++) {
        const x = hPrev[i];
        s0 += Whh[w0 + i] * x;
        s1 += Whh[w1 + i] * x;
        s2 += Whh[w2 + i] * x;
        s3 += Whh[w3 + i] * x;
      }
      gates[o] = s0;
      gates[o + 1] = s1;
      gates[o + 2] = s2;
      gates[o + 3] = s3;
    }
    const { h, c } = state; // every gate has read h_{t-1}: both can be overwritten now
    for (let j = 0; j < H; j++) {
      const i = sigmoid(gates[j]); // input gate
      const f = sigmoid(gates[H + j]); // forget gate
      const g = Math.tanh(gates[2 * H + j]); // candidate
      const o = sigmoid(gates[3 * H + j]); // output gate
      c[j] = f * c[j] + i * g; // c_t = f * c_{t-1} + i * g
      h[j] = o * Math.tanh(c[j]); // h_t = o * tanh(c_t)
    }
    stats.steps++;
    return wantLogits ? lstmHead(model, h) : null; // (V,)
  }

  const lstmHead = (model, h) => // head: h (H,) -> logits (V,)
    linear(model.t["head.weight"].data, model.t["head.bias"].data, h, 1, model.vocab.length, model.config.hidden,
           new Float64Array(model.vocab.length));

  // ---- the GPT: CharTransformer ------------------------------------------------------------------

  function embed(model, tokens, start, X) {
    // x (T, d) = embed(tokens) + LearnedPositions(start .. start + T - 1)
    const d = model.config.d_model, emb = model.t["embed.weight"].data, P = model.t["transformer.positions.weight"].data;
    tokens.forEach((token, r) => {
      for (let i = 0; i < d; i++) X[r * d + i] = emb[token * d + i] + P[(start + r) * d + i];
    });
  }

  function attend(q, keys, values, n, lo, dHead, context, weights) {
    // one head, one query: softmax(q . k_j / sqrt(d_head)) over keys j < n, then the weighted sum of values
    // q (d_head,) at q[lo..]; keys, values (n, d) of which this head reads features lo .. lo + d_head - 1
    const d = keys.stride;
    let max = -Infinity;
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let i = 0; i < dHead; i++) s += q[lo + i] * keys.data[j * d + lo + i];
      weights[j] = s / Math.sqrt(dHead);
      if (weights[j] > max) max = weights[j];
    }
    let total = 0;
    for (let j = 0; j < n; j++) total += (weights[j] = Math.exp(weights[j] - max));
    for (let i = 0; i < dHead; i++) context[lo + i] = 0;
    for (let j = 0; j < n; j++) {
      weights[j] /= total; // softmax over the keys: weights (n,)
      for (let i = 0; i < dHead; i++) context[lo + i] += weights[j] * values.data[j * d + lo + i];
    }
  }

  function mlp(model, p, X, rows) {
    // x = x + linear2(gelu(linear1(norm2(x)))): d -> d_ff -> d, over rows
    const { t, work } = model, d = model.config.d_model, dFF = model.config.d_ff;
    layerNorm(X, rows, d, t[p + "norm2.weight"].data, t[p + "norm2.bias"].data, work.a);
    const wide = linear(t[p + "linear1.weight"].data, t[p + "linear1.bias"].data, work.a, rows, dFF, d, work.wide);
    for (let i = 0; i < rows * dFF; i++) wide[i] = gelu(wide[i]);
    linear(t[p + "linear2.weight"].data, t[p + "linear2.bias"].data, wide, rows, d, dFF, work.narrow);
    for (let i = 0; i < rows * d; i++) X[i] += work.narrow[i]; // residual
  }

  function gptHead(model, X, row) {
    // the final LayerNorm and head, for one row of x (T, d) -> logits (V,)
    const { t, work } = model, d = model.config.d_model, V = model.vocab.length;
    const x = X.subarray(row * d, (row + 1) * d);
    layerNorm(x, 1, d, t["transformer.norm.weight"].data, t["transformer.norm.bias"].data, work.a);
    return linear(t["head.weight"].data, t["head.bias"].data, work.a, 1, V, d, new Float64Array(V));
  }

  function gptForward(model, tokens, allRows = false) {
    // CharTransformer.forward: tokens (T,), T <= context -> {logits: (T, V) rows or the last (V,),
    // attention: [layer][head] (T,), the last position's weights over the window}
    const { t, work } = model, cfg = model.config, d = cfg.d_model, heads = cfg.heads, dHead = d / heads;
    const T = tokens.length;
    if (T > cfg.context) throw new Error(`the model reads at most ${cfg.context} characters`);
    const X = work.x;
    embed(model, tokens, 0, X);
    const attention = [];
    for (const b of model.blocksIndex) {
      const p = `transformer.blocks.${b}.`;
      // the rows that go on past the attention: every one, but in the last block only the last unless all rows'
      // logits are asked for (the head reads nothing else; a third of the work when the window slides)
      const from = allRows || b < cfg.layers - 1 ? 0 : T - 1, rows = T - from;
      // x = x + MultiHeadAttention(norm1(x)), causal: position r reads itself and every earlier one
      layerNorm(X, T, d, t[p + "norm1.weight"].data, t[p + "norm1.bias"].data, work.a); // (T, d)
      const qkv = linear(t[p + "self_attn.in_proj_weight"].data, t[p + "self_attn.in_proj_bias"].data, work.a,
                         T, 3 * d, d, work.qkv); // (T, 3d): q, k, v side by side, every row a key and a value
      const keys = { data: qkv.subarray(d), stride: 3 * d }, values = { data: qkv.subarray(2 * d), stride: 3 * d };
      const last = [];
      for (let r = from; r < T; r++) {
        const q = qkv.subarray(r * 3 * d), context = work.context.subarray(r * d); // merge_heads: (heads, d_head) -> (d,)
        for (let h = 0; h < heads; h++) {
          attend(q, keys, values, r + 1, h * dHead, dHead, context, work.weights); // split_heads: head h
          if (r === T - 1) last.push(Float64Array.from(work.weights.subarray(0, T)));
        }
      }
      attention.push(last);
      const x = X.subarray(from * d); // (rows, d)
      linear(t[p + "self_attn.out_proj.weight"].data, t[p + "self_attn.out_proj.bias"].data,
             work.context.subarray(from * d), rows, d, d, work.narrow);
      for (let i = 0; i < rows * d; i++) x[i] += work.narrow[i]; // residual
      mlp(model, p, x, rows);
    }
    stats.steps += T;
    const logits = allRows ? tokens.map((_, r) => gptHead(model, X, r)) : gptHead(model, X, T - 1);
    return { logits, attention };
  }

  function gptCache(model) {
    // one KVCache per block: keys and values of every position read so far, each (n, d) in (context, d)
    const size = model.config.context * model.config.d_model;
    return model.blocksIndex.map(() => ({ keys: new Float64Array(size), values: new Float64Array(size), n: 0 }));
  }

  function gptStep(model, caches, token) {
    // CharTransformer.stream for one token: position n = caches[0].n -> logits (V,); the window
    // fills one position at a time, each reading the cached keys and values of the earlier ones
    const { t, work } = model, cfg = model.config, d = cfg.d_model, heads = cfg.heads, dHead = d / heads;
    const pos = caches[0].n;
    if (pos >= cfg.context) throw new Error(`the model reads at most ${cfg.context} characters`);
    const x = work.x.subarray(0, d); // (1, d)
    embed(model, [token], pos, x);
    for (const b of model.blocksIndex) {
      const p = `transformer.blocks.${b}.`, cache = caches[b];
      layerNorm(x, 1, d, t[p + "norm1.weight"].data, t[p + "norm1.bias"].data, work.a);
      const qkv = linear(t[p + "self_attn.in_proj_weight"].data, t[p + "self_attn.in_proj_bias"].data, work.a,
                         1, 3 * d, d, work.qkv); // (3d,)
      cache.keys.set(qkv.subarray(d, 2 * d), pos * d); // KVCache.extend: (n + 1, d)
      cache.values.set(qkv.subarray(2 * d, 3 * d), pos * d);
      cache.n = pos + 1;
      for (let h = 0; h < heads; h++) {
        attend(qkv, { data: cache.keys, stride: d }, { data: cache.values, stride: d }, pos + 1, h * dHead, dHead,
               work.context, work.weights);
      }
      linear(t[p + "self_attn.out_proj.weight"].data, t[p + "self_attn.out_proj.bias"].data, work.context, 1, d, d,
             work.narrow);
      for (let i = 0; i < d; i++) x[i] += work.narrow[i]; // residual
      mlp(model, p, x, 1);
    }
    stats.steps++;
    return { logits: gptHead(model, x, 0) };
  }

  // ---- what the test and the widget call --------------------------------------------------------

  function prepare(model) {
    // the buffers every step writes, once per model; the weights as float64 too, so that every loop
    // reads one kind of array (mixing Float32Array and Float64Array slows the compiled loops down)
    const cfg = model.config, V = model.vocab.length;
    for (const tensor of Object.values(model.t)) tensor.data = Float64Array.from(tensor.data);
    if (model.kind === "gpt") {
      const C = cfg.context, d = cfg.d_model;
      model.blocksIndex = [...Array(cfg.layers).keys()];
      model.work = { x: new Float64Array(C * d), a: new Float64Array(C * d), qkv: new Float64Array(C * 3 * d),
                     context: new Float64Array(C * d), narrow: new Float64Array(C * d),
                     wide: new Float64Array(C * cfg.d_ff), weights: new Float64Array(C) };
    } else {
      const E = cfg.embedding, H = cfg.hidden, t = model.t;
      // inputGates (V, 4H): W_ih embed(v) + b_ih + b_hh for every character v
      const inputGates = linear(t["rnn.weight_ih_l0"].data, t["rnn.bias_ih_l0"].data, t["embed.weight"].data,
                                V, 4 * H, E, new Float64Array(V * 4 * H));
      const bhh = t["rnn.bias_hh_l0"].data;
      for (let i = 0; i < V * 4 * H; i++) inputGates[i] += bhh[i % (4 * H)];
      model.work = { inputGates, gates: new Float64Array(4 * H) };
    }
    return model;
  }

  function logits(model, tokens) {
    // tokens (T,) read from an empty state, one at a time -> logits (T, V) at every position, as model(tokens)
    const rows = [];
    if (model.kind === "lstm") {
      const state = lstmState(model);
      for (const token of tokens) rows.push(Array.from(lstmStep(model, state, token)));
    } else {
      const caches = gptCache(model);
      for (const token of tokens) rows.push(Array.from(gptStep(model, caches, token).logits));
    }
    return rows;
  }

  // characters as a reader counts them: grapheme clusters, so that an emoji with its modifiers and joiners is one
  // (code points where a browser has no Intl.Segmenter)
  const segmenter = window.Intl?.Segmenter && new Intl.Segmenter(undefined, { granularity: "grapheme" });
  const characters = (text) => (segmenter ? Array.from(segmenter.segment(text), (s) => s.segment) : [...text]);

  function encode(model, text) {
    // text -> {tokens, at, skipped}: each character in the vocabulary is a token, at[i] its position in the text
    // (0-based, in characters); any other is skipped, whole (an emoji, a letter with a combining accent), and listed
    const tokens = [], at = [], skipped = [];
    characters(text).forEach((ch, i) => {
      const id = model.ids.get(ch);
      if (id === undefined) skipped.push(ch);
      else {
        tokens.push(id);
        at.push(i);
      }
    });
    return { tokens, at, skipped };
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

  window.lessonlibCharModels = { load: loadOnce, logits, encode, distribution, lstmState, lstmStep, gptCache,
                                 gptStep, gptForward, stats };

  // ---- the widget ----------------------------------------------------------------------------------

  // The LSTM reads the whole prompt, carrying its state, up to LSTM_LIMIT characters; past that it drops the
  // oldest LSTM_DROP at once and reads the rest again, so that one reread serves the next 4,000 keys
  const LSTM_LIMIT = 12000, LSTM_DROP = 4000;
  const LSTM_SLICE = 1000; // characters the LSTM reads in one go (about 60 ms), before the page may answer a key
  const RUN = 16; // characters a run of the shading holds at most (add, below)
  const NAMES = { lstm: "LSTM", gpt: "Transformer" };

  function shown(ch) {
    // a character as the page names it: whitespace and invisible characters by name or code point, which keeps a
    // joiner from being an empty item and a right-to-left override (U+202E) from reordering the sentence;
    // an emoji whole, its joiners included
    if (ch === "\n") return "newline";
    if (ch === " ") return "space";
    if (/\p{Extended_Pictographic}/u.test(ch)) return ch;
    const named = (c, i) => /[\p{C}\p{Z}]/u.test(c) || (i === 0 && /\p{M}/u.test(c)); // a mark with nothing to sit on
    const code = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
    return [...ch].map((c, i) => (named(c, i) ? ` ${code(c)} ` : c)).join("").replace(/ +/g, " ").trim();
  }

  function say(element, parts) {
    // parts: text, and {isolated: text} for characters from the prompt: each of those in a <bdi>, so that a
    // right-to-left one cannot reorder the sentence around it
    element.replaceChildren(...parts.map((part) => (typeof part === "string" ? part
      : Object.assign(document.createElement("bdi"), { textContent: part.isolated }))));
  }

  const percent = (p) => `${(100 * p).toFixed(0)}%`;
  const signed = (v) => (v < 0 ? "\u2212" : "+") + Math.abs(v).toFixed(2);
  const count = new Intl.NumberFormat("en").format; // 10,000: made once (toLocaleString makes one per call, 5 us)

  function largest(n, value, k = 3) {
    // the indices i < n of the k largest value(i), largest first (the earlier of equals): one pass, no sort
    const top = [];
    for (let i = 0; i < n; i++) {
      if (top.length === k && value(i) <= value(top[k - 1])) continue;
      top.push(i);
      top.sort((a, b) => value(b) - value(a));
      top.length = Math.min(top.length, k);
    }
    return top;
  }

  // the model the page shows first: its weights are fetched as soon as this script runs, the other's later
  const defaultKind = (root) => root.querySelector('input[name="char-model-kind"]:checked').value;
  // (a failure is reported by setUp, which awaits the same promise: not here as well)
  document.querySelectorAll(".char-model").forEach((root) =>
    loadOnce(JSON.parse(root.dataset.models)[defaultKind(root)]).catch(() => {}));

  function setUp(root) {
    if (root.dataset.charModelReady || root.dataset.charModelLoading) return;
    root.dataset.charModelLoading = "true";
    const $ = (s) => root.querySelector(s);
    const live = $(".char-model__live"), error = $(".char-model__error"), status = $(".char-model__status");
    const prompt = $(".char-model__prompt"), note = $(".char-model__note"), bars = $(".char-model__bars");
    const tbody = $(".char-model__table tbody"), temperature = $(".char-model__temperature");
    const temperatureValue = $(".char-model__temperature-value"), topK = $(".char-model__top-k");
    const write = $(".char-model__write"), written = $(".char-model__written");
    const cell = $(".char-model__cell"), layer = $(".char-model__layer"), head = $(".char-model__head");
    const shaded = $(".char-model__shaded"), summary = $(".char-model__inside-summary");
    const radios = [...root.querySelectorAll('input[name="char-model-kind"]')];
    const urls = JSON.parse(root.dataset.models);

    const models = {};
    let generation = 0, queued = false, pendingAnnounce = null;
    let k = Number(topK.value), correction = ""; // the top-k used, and what was said of the field's value
    // every LSTM state read: row i of h and c (each (n, H)) after tokens[0..i]
    const lstmCache = { tokens: [], h: new Float32Array(0), c: new Float32Array(0) };
    // the LSTM's shading as drawn: the cell, the tokens and their positions, one span each
    const drawn = { cell: -1, tokens: [], at: [], spans: [] };

    const kind = () => radios.find((r) => r.checked).value;

    function loaded(name) {
      // the model, fetched once; the controls that depend on its sizes get them
      return loadOnce(urls[name]).then((model) => {
        if (!models[name]) {
          models[name] = model;
          model.names = model.vocab.map(shown); // each character's name, for the shading's 10,000 titles
          if (name === "lstm") cell.max = model.config.hidden - 1;
          else {
            layer.max = model.config.layers;
            head.max = model.config.heads;
          }
        }
        return model;
      });
    }

    function lstmRead(model, tokens, most = Infinity) {
      // carry the state: resume after the longest prefix read before, so that a key typed at the end costs one
      // step. Every state is kept, in float32 (PyTorch's precision, half the memory): for the shading, and to
      // resume after an edit. Reads at most `most` characters: null if that left some unread
      const H = model.config.hidden, cache = lstmCache;
      let same = 0;
      while (same < tokens.length && same < cache.tokens.length && tokens[same] === cache.tokens[same]) same++;
      cache.tokens.length = same;
      if (cache.c.length < tokens.length * H) { // room for every state, doubling as the prompt grows
        const rows = Math.max(tokens.length, 2 * cache.c.length / H);
        for (const key of ["h", "c"]) {
          const grown = new Float32Array(rows * H);
          grown.set(cache[key].subarray(0, same * H));
          cache[key] = grown;
        }
      }
      const state = lstmState(model);
      if (same) {
        state.h.set(cache.h.subarray((same - 1) * H, same * H));
        state.c.set(cache.c.subarray((same - 1) * H, same * H));
      }
      for (let i = same; i < Math.min(tokens.length, same + most); i++) {
        lstmStep(model, state, tokens[i], false);
        cache.h.set(state.h, i * H);
        cache.c.set(state.c, i * H);
        cache.tokens.push(tokens[i]);
      }
      return cache.tokens.length < tokens.length ? null : { logits: lstmHead(model, state.h), state };
    }

    function read(model) {
      // the prompt as the chosen model reads it: {tokens, at (each one's position in the prompt), notes (say's parts)}
      const { tokens, at, skipped } = encode(model, prompt.value);
      const notes = [];
      if (skipped.length) {
        const unique = [...new Set(skipped)].slice(0, 5).map((ch) => ({ isolated: shown(ch) }));
        notes.push(`Skipped ${count(skipped.length)} character${skipped.length > 1 ? "s" : ""} the model has never ` +
          "seen (", ...unique.flatMap((item, i) => (i ? [", ", item] : [item])), ").");
      }
      const n = tokens.length, gpt = model.kind === "gpt";
      const start = gpt ? Math.max(0, n - model.config.context)
        : Math.ceil(Math.max(0, n - LSTM_LIMIT) / LSTM_DROP) * LSTM_DROP;
      if (start) {
        notes.push(`${notes.length ? " " : ""}The ${gpt ? "transformer" : "LSTM"} reads the last ${count(n - start)} ` +
          `of these ${count(n)} characters${gpt ? ", its context" : ""}.`);
      }
      return { tokens: tokens.slice(start), at: at.slice(start), notes };
    }

    function clamp(input) {
      const value = Math.min(Number(input.max), Math.max(Number(input.min), Math.round(Number(input.value)) || 0));
      if (String(value) !== input.value) input.value = value;
      return value;
    }

    function topKUsed() {
      // the field as a whole number from 1 to its max; any other value is corrected in the field, and said.
      // An empty field is being typed into: the last k stands
      if (topK.value === "") return;
      const raw = topK.value, max = Number(topK.max);
      k = Math.min(max, Math.max(1, Math.round(Number(raw)) || 1));
      if (String(k) !== raw) {
        topK.value = k;
        correction = `Top-k takes a whole number from 1 to ${max}: ${raw} became ${k}.`;
      }
    }

    function add(ch) {
      // one character of the shading, its span. The spans flow in runs (inline blocks) of RUN characters at most,
      // ended after a space once half full, so that lines still break between words; a newline stands between runs
      // and breaks the line. A key typed at 10,000 characters then lays out one run and a paragraph of 1,000
      // runs, not one of 10,000 spans (15 ms a key)
      const span = document.createElement("span");
      span.textContent = ch;
      const run = shaded.lastElementChild, held = run?.className === "char-model__run" ? run.childElementCount : RUN;
      if (ch === "\n") shaded.append(span);
      else if (held < RUN && !(held >= RUN / 2 && run.lastChild.textContent === " ")) run.append(span);
      else {
        const fresh = document.createElement("span");
        fresh.className = "char-model__run";
        fresh.append(span);
        shaded.append(fresh);
      }
      return span;
    }

    function paint(span, model, token, position, value, color) {
      span.title = `${model.names[token]}, character ${count(position + 1)}: ${value}`;
      span.style.backgroundColor = color;
      return span;
    }

    function unshade() {
      shaded.replaceChildren();
      Object.assign(drawn, { cell: -1, tokens: [], at: [], spans: [] });
    }

    function shadeCell(model, tokens, at, j) {
      // cell j's tanh(c) after each character read. Only the characters from the first whose token or position
      // changed are drawn again (a key typed at the end adds one span); another cell repaints the rest
      const H = model.config.hidden, c = lstmCache.c;
      const shade = (span, i) => {
        const v = Math.tanh(c[i * H + j]);
        // red above 0, blue below; light enough that the text stays legible in both palettes
        return paint(span, model, tokens[i], at[i], signed(v),
                     v >= 0 ? `rgba(214, 39, 40, ${0.45 * v})` : `rgba(31, 119, 180, ${-0.45 * v})`);
      };
      let same = 0;
      while (same < tokens.length && same < drawn.tokens.length && tokens[same] === drawn.tokens[same] &&
             at[same] === drawn.at[same]) same++;
      const atEnd = shaded.scrollTop + shaded.clientHeight >= shaded.scrollHeight - 2;
      if (!same) unshade();
      for (const span of drawn.spans.splice(same)) {
        const run = span.parentNode;
        span.remove();
        if (run !== shaded && !run.firstChild) run.remove();
      }
      if (drawn.cell !== j) drawn.spans.forEach(shade);
      for (let i = same; i < tokens.length; i++) drawn.spans.push(shade(add(model.vocab[tokens[i]]), i));
      Object.assign(drawn, { cell: j, tokens, at });
      if (atEnd) shaded.scrollTop = shaded.scrollHeight; // the box follows the typing, unless scrolled back
    }

    function inside(model, tokens, at, attention) {
      // the LSTM's chosen cell over every character read, or the GPT's chosen head from the last one;
      // positions are the prompt's
      for (const part of root.querySelectorAll("[data-for]")) part.hidden = part.dataset.for !== model.kind;
      const where = (i) => `${shown(model.vocab[tokens[i]])} (character ${count(at[i] + 1)})`;
      if (model.kind === "lstm") {
        const j = clamp(cell), H = model.config.hidden, c = lstmCache.c, n = tokens.length;
        shadeCell(model, tokens, at, j);
        const value = (i) => c[i * H + j]; // ranked before tanh, which keeps the order
        const at3 = (i) => `${signed(Math.tanh(value(i)))} at ${where(i)}`;
        const highest = largest(n, value), lowest = largest(n, (i) => -value(i));
        summary.textContent = `Cell ${j}, tanh(c) over the ${count(n)} characters read: ` +
          `highest ${highest.map(at3).join(", ")}; lowest ${lowest.map(at3).join(", ")}.`;
      } else {
        unshade(); // the window moved: every weight is new
        const l = clamp(layer), h = clamp(head), weights = attention[l - 1][h - 1], top = Math.max(...weights);
        weights.forEach((w, i) => paint(add(model.vocab[tokens[i]]), model, tokens[i], at[i], percent(w),
                                        `rgba(214, 39, 40, ${(0.45 * w) / top})`));
        const back = (i) => (i === tokens.length - 1 ? "the last" : `${tokens.length - 1 - i} back`);
        summary.textContent = `Layer ${l}, head ${h}, from the last character, ${shown(model.vocab[tokens.at(-1)])}: ` +
          largest(weights.length, (i) => weights[i])
            .map((i) => `${percent(weights[i])} on ${shown(model.vocab[tokens[i]])} (${back(i)})`).join(", ") + ".";
      }
    }

    function predict(announce) {
      // announce: null (say nothing), "prediction", "top-k" or "inside" (what the last change was about)
      const model = models[kind()];
      const { tokens, at, notes } = read(model);
      const andThen = (sentence) => [...notes, `${notes.length ? " " : ""}${sentence}`];
      const got = !tokens.length ? null
        : model.kind === "lstm" ? lstmRead(model, tokens, LSTM_SLICE) : gptForward(model, tokens);
      if (tokens.length && !got) { // a long prompt, pasted or edited near its start: a slice at a time, keys answered
        say(note, andThen(`Reading: ${count(lstmCache.tokens.length)} of ${count(tokens.length)} characters…`));
        setTimeout(() => schedule(announce));
        return;
      }
      bars.replaceChildren();
      tbody.replaceChildren();
      if (!tokens.length) {
        unshade();
        summary.textContent = "";
        say(note, andThen("Type at least one character the model knows."));
        if (announce) say(status, andThen("Type at least one character the model knows."));
      } else {
        say(note, notes);
        const { logits: row, attention } = got;
        const { probs, order } = distribution(row, Number(temperature.value), k);
        const top = order.slice(0, 10);
        for (const id of top) {
          const label = shown(model.vocab[id]), p = probs[id];
          const bar = document.createElement("div");
          bar.className = "char-model__bar";
          bar.innerHTML = '<span class="char-model__char"></span><span class="char-model__track">' +
            '<span class="char-model__fill"></span></span><span class="char-model__p"></span>';
          bar.children[0].textContent = label;
          bar.querySelector(".char-model__fill").style.width = `${(100 * p).toFixed(1)}%`;
          bar.children[2].textContent = `${(100 * p).toFixed(1)}%`;
          bars.append(bar);
          const tr = document.createElement("tr");
          tr.innerHTML = "<td></td><td></td>";
          tr.children[0].textContent = label;
          tr.children[1].textContent = `${(100 * p).toFixed(1)}%`;
          tbody.append(tr);
        }
        root.dataset.top = shown(model.vocab[top[0]]);
        inside(model, tokens, at, attention);
        if (announce === "inside") status.textContent = summary.textContent;
        else if (announce) {
          const knob = announce === "top-k" ? `${correction || `Top-k ${k}.`} ` : "";
          say(status, [`${knob}${NAMES[model.kind]}: most likely next character ${shown(model.vocab[top[0]])}, ` +
            `${percent(probs[top[0]])}; then ${top.slice(1, 3).map((i) => shown(model.vocab[i])).join(", ")}.` +
            (notes.length ? " " : ""), ...notes]);
        }
      }
      correction = "";
      // shown: the fast-typing test counts predictions, and the benchmark times a key to this mark
      root.dataset.predictions = Number(root.dataset.predictions || 0) + 1;
    }

    function schedule(announce) {
      // fast typing: each change supersedes the last; one prediction, for the latest prompt, once the event
      // being handled is done (a script's burst of them is read once). A microtask, not a timer or an animation
      // frame: Chromium draws the typed key first and runs those a frame later, so the prediction lagged behind
      // the key. A writing under way sees the generation move on and stops
      generation++;
      pendingAnnounce = announce;
      if (queued) return;
      queued = true;
      queueMicrotask(() => {
        queued = false;
        const name = kind();
        if (models[name]) return predict(pendingAnnounce);
        note.textContent = `Loading the ${NAMES[name]}…`;
        const mine = generation;
        loaded(name).then(() => { if (mine === generation) predict(pendingAnnounce); }, (e) => unavailable(name, e));
      });
    }

    function writeText() {
      const mine = ++generation, model = models[kind()];
      const { tokens } = read(model);
      if (!tokens.length) return predict("prediction");
      const tau = Number(temperature.value), used = k;
      const out = [];
      let state = null, caches = null, recent = tokens, logitsRow = null;
      if (model.kind === "lstm") ({ logits: logitsRow, state } = lstmRead(model, tokens));
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
          const id = draw(distribution(logitsRow, tau, used).probs);
          out.push(id);
          if (model.kind === "lstm") logitsRow = lstmStep(model, state, id);
          else if (recent.length < model.config.context) {
            recent = [...recent, id];
            logitsRow = gptStep(model, caches, id).logits; // the window fills: one position through the KV cache
          } else {
            // the window slides: every position moves, so no cached key or value applies; reread it in one pass
            recent = [...recent.slice(1), id];
            logitsRow = gptForward(model, recent).logits;
          }
        }
        written.textContent = out.map((i) => model.vocab[i]).join("");
        if (out.length < 200) setTimeout(chunk, 0);
        else status.textContent = `Wrote 200 characters at temperature ${tau.toFixed(1)}, top-k ${used}.`;
      };
      setTimeout(chunk, 0);
    }

    function unavailable(name, e) {
      // a model asked for after the first one ran failed to load: the other keeps running
      const radio = radios.find((r) => r.value === name);
      radio.disabled = true;
      if (radio.checked) radios.find((r) => r !== radio).checked = true;
      error.hidden = false;
      error.textContent = `The ${NAMES[name]} could not be loaded (${e.message}); the ${NAMES[kind()]} still runs.`;
      schedule("prediction");
    }

    function failed(e) {
      error.hidden = false;
      error.textContent = `The live models could not be loaded (${e.message}); the samples and the figure above stand in.`;
      live.hidden = true;
      $(".char-model__figure").hidden = false;
      root.dataset.charModelReady = "failed";
    }

    loaded(kind()).then(() => {
      prompt.addEventListener("input", () => schedule("prediction"));
      radios.forEach((r) => r.addEventListener("change", () => schedule("prediction")));
      temperature.addEventListener("input", () => {
        temperatureValue.textContent = Number(temperature.value).toFixed(1);
        schedule("prediction");
      });
      topK.addEventListener("input", () => {
        topKUsed();
        schedule("top-k");
      });
      topK.addEventListener("change", () => { if (topK.value === "") topK.value = k; }); // left empty: the k used
      [cell, layer, head].forEach((input) => input.addEventListener("input", () => schedule("inside")));
      write.addEventListener("click", writeText);
      live.hidden = false;
      $(".char-model__figure").hidden = true; // the same figure is in the lesson above; it stands in only without the models
      predict(null);
      root.dataset.firstPredictionMs = performance.now().toFixed(0); // since navigation began (the benchmark reads it)
      root.dataset.charModelReady = "true";
      // the other model, once the page is idle: choosing it then costs no wait
      const other = radios.map((r) => r.value).find((name) => name !== kind());
      (window.requestIdleCallback || setTimeout)(() => loaded(other).catch((e) => unavailable(other, e)));
    }, failed);
  }

  lessonlibOnPageView(() => document.querySelectorAll(".char-model").forEach(setUp));
})();

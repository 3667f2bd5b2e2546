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
   per character; the GPT reads a whole window in one pass (gptForward), matrix by matrix.

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
    // one character: token -> embed (E,) -> nn.LSTM step (h, c each (H,)) -> head (V,)
    const { t, work } = model, H = model.config.hidden, V = model.vocab.length;
    // gates (4H,) = W_ih x + b_ih + W_hh h + b_hh: torch's two biases, rows in the order i, f, g, o;
    // W_ih x + b_ih + b_hh was computed once per character (prepare: inputGates (V, 4H))
    const gates = work.gates;
    gates.set(work.inputGates.subarray(token * 4 * H, (token + 1) * 4 * H));
    const Whh = t["rnn.weight_hh_l0"].data, hPrev = state.h;
    for (let o = 0; o < 4 * H; o++) {
      let s = gates[o];
      const w = o * H;
      for (let i = 0; i < H; i++) s += Whh[w + i] * hPrev[i];
      gates[o] = s;
    }
    const h = new Float64Array(H), c = new Float64Array(H); // new each step: the widget keeps every state
    for (let j = 0; j < H; j++) {
      const i = sigmoid(gates[j]); // input gate
      const f = sigmoid(gates[H + j]); // forget gate
      const g = Math.tanh(gates[2 * H + j]); // candidate
      const o = sigmoid(gates[3 * H + j]); // output gate
      c[j] = f * state.c[j] + i * g; // c_t = f * c_{t-1} + i * g
      h[j] = o * Math.tanh(c[j]); // h_t = o * tanh(c_t)
    }
    stats.steps++;
    const logits = wantLogits ? lstmHead(model, h) : null; // (V,)
    return { state: { h, c }, logits };
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
      // x = x + MultiHeadAttention(norm1(x)), causal: position r reads itself and every earlier one
      layerNorm(X, T, d, t[p + "norm1.weight"].data, t[p + "norm1.bias"].data, work.a); // (T, d)
      const qkv = linear(t[p + "self_attn.in_proj_weight"].data, t[p + "self_attn.in_proj_bias"].data, work.a,
                         T, 3 * d, d, work.qkv); // (T, 3d): q, k, v side by side
      const keys = { data: qkv.subarray(d), stride: 3 * d }, values = { data: qkv.subarray(2 * d), stride: 3 * d };
      const last = [];
      for (let r = 0; r < T; r++) {
        const q = qkv.subarray(r * 3 * d), context = work.context.subarray(r * d); // merge_heads: (heads, d_head) -> (d,)
        for (let h = 0; h < heads; h++) {
          attend(q, keys, values, r + 1, h * dHead, dHead, context, work.weights); // split_heads: head h
          if (r === T - 1) last.push(Float64Array.from(work.weights.subarray(0, T)));
        }
      }
      attention.push(last);
      linear(t[p + "self_attn.out_proj.weight"].data, t[p + "self_attn.out_proj.bias"].data, work.context, T, d, d,
             work.narrow);
      for (let i = 0; i < T * d; i++) X[i] += work.narrow[i]; // residual
      mlp(model, p, X, T);
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

  window.lessonlibCharModels = { load: loadOnce, logits, encode, distribution, lstmState, lstmStep, gptCache,
                                 gptStep, gptForward, stats };

  // ---- the widget ----------------------------------------------------------------------------------

  const LSTM_LIMIT = 2000; // characters the LSTM reads: the prompt's last 2,000
  const NAMES = { lstm: "LSTM", gpt: "Transformer" };

  function shown(ch) {
    if (ch === "\n") return "newline";
    if (ch === " ") return "space";
    const code = ch.codePointAt(0);
    if (code < 32 || code === 127) return `U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
    return ch;
  }

  const percent = (p) => `${(100 * p).toFixed(0)}%`;
  const signed = (v) => (v < 0 ? "\u2212" : "+") + Math.abs(v).toFixed(2);

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
    let generation = 0, frame = 0, pendingAnnounce = null;
    const lstmCache = { tokens: [], states: [] }; // states[i]: after reading tokens[0..i]

    const kind = () => radios.find((r) => r.checked).value;

    function loaded(name) {
      // the model, fetched once; the controls that depend on its sizes get them
      return loadOnce(urls[name]).then((model) => {
        if (!models[name]) {
          models[name] = model;
          if (name === "lstm") cell.max = model.config.hidden - 1;
          else {
            layer.max = model.config.layers;
            head.max = model.config.heads;
          }
        }
        return model;
      });
    }

    function lstmRead(model, tokens) {
      // resume from the longest prefix read before: typing at the end costs one step per character
      let same = 0;
      while (same < tokens.length && same < lstmCache.tokens.length && tokens[same] === lstmCache.tokens[same]) same++;
      lstmCache.tokens.length = same;
      lstmCache.states.length = same;
      let state = same ? lstmCache.states[same - 1] : lstmState(model);
      for (let i = same; i < tokens.length; i++) {
        state = lstmStep(model, state, tokens[i], false).state;
        lstmCache.tokens.push(tokens[i]);
        lstmCache.states.push(state);
      }
      return { logits: lstmHead(model, state.h), state };
    }

    function read(model) {
      // the prompt as the chosen model reads it: {tokens, notes}
      const text = prompt.value, { tokens, skipped } = encode(model, text);
      const notes = [];
      if (skipped.length) {
        const unique = [...new Set(skipped)].slice(0, 5).map(shown).join(", ");
        notes.push(`Skipped ${skipped.length} character${skipped.length > 1 ? "s" : ""} the model has never seen (${unique}).`);
      }
      const limit = model.kind === "gpt" ? model.config.context : LSTM_LIMIT;
      if (tokens.length > limit) {
        notes.push(model.kind === "gpt"
          ? `The transformer reads the last ${limit} of these ${tokens.length.toLocaleString("en")} characters, its context.`
          : `The LSTM reads the last ${limit.toLocaleString("en")} of these ${tokens.length.toLocaleString("en")} characters.`);
      }
      return { tokens: tokens.slice(-limit), notes };
    }

    function clamp(input) {
      const value = Math.min(Number(input.max), Math.max(Number(input.min), Math.round(Number(input.value)) || 0));
      if (String(value) !== input.value) input.value = value;
      return value;
    }

    function shade(model, tokens, values, color) {
      // the characters read, each shaded by its value (-1 .. 1); its value is its title, and the summary's
      shaded.replaceChildren(...tokens.map((id, i) => {
        const span = document.createElement("span");
        span.textContent = model.vocab[id];
        span.title = `${shown(model.vocab[id])}: ${values[i].toFixed(2)}`;
        span.style.backgroundColor = color(values[i]);
        return span;
      }));
    }

    function inside(model, tokens, attention) {
      // the LSTM's chosen cell over every character read, or the GPT's chosen head from the last one
      for (const part of root.querySelectorAll("[data-for]")) part.hidden = part.dataset.for !== model.kind;
      if (model.kind === "lstm") {
        const j = clamp(cell), values = lstmCache.states.map((s) => Math.tanh(s.c[j]));
        // red above 0, blue below; light enough that the text stays legible in both palettes
        shade(model, tokens, values, (v) => (v >= 0 ? `rgba(214, 39, 40, ${0.45 * v})` : `rgba(31, 119, 180, ${-0.45 * v})`));
        const order = [...values.keys()].sort((a, b) => values[b] - values[a]);
        const at = (i) => `${signed(values[i])} at ${shown(model.vocab[tokens[i]])} (character ${i + 1})`;
        summary.textContent = `Cell ${j}, tanh(c) over the ${tokens.length.toLocaleString("en")} characters read: ` +
          `highest ${order.slice(0, 3).map(at).join(", ")}; lowest ${order.slice(-3).reverse().map(at).join(", ")}.`;
      } else {
        const l = clamp(layer), h = clamp(head), weights = attention[l - 1][h - 1], top = Math.max(...weights);
        shade(model, tokens, [...weights], (w) => `rgba(214, 39, 40, ${(0.45 * w) / top})`);
        const order = [...weights.keys()].sort((a, b) => weights[b] - weights[a]).slice(0, 3);
        const back = (i) => (i === tokens.length - 1 ? "the last" : `${tokens.length - 1 - i} back`);
        summary.textContent = `Layer ${l}, head ${h}, from the last character, ${shown(model.vocab[tokens.at(-1)])}: ` +
          order.map((i) => `${percent(weights[i])} on ${shown(model.vocab[tokens[i]])} (${back(i)})`).join(", ") + ".";
      }
    }

    function predict(announce) {
      // announce: null (say nothing), "prediction" or "inside" (what the last change was about)
      const model = models[kind()];
      const { tokens, notes } = read(model);
      note.textContent = notes.join(" ");
      bars.replaceChildren();
      tbody.replaceChildren();
      root.dataset.predictions = Number(root.dataset.predictions || 0) + 1; // the fast-typing test counts them
      if (!tokens.length) {
        shaded.replaceChildren();
        summary.textContent = "";
        note.textContent = (note.textContent + " Type at least one character the model knows.").trim();
        if (announce) status.textContent = note.textContent;
        return;
      }
      const { logits: row, attention } = model.kind === "lstm" ? lstmRead(model, tokens) : gptForward(model, tokens);
      const { probs, order } = distribution(row, Number(temperature.value), Number(topK.value));
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
      inside(model, tokens, attention);
      if (announce === "inside") status.textContent = summary.textContent;
      else if (announce) {
        status.textContent = `${NAMES[model.kind]}: most likely next character ${shown(model.vocab[top[0]])}, ` +
          `${percent(probs[top[0]])}; then ${top.slice(1, 3).map((i) => shown(model.vocab[i])).join(", ")}.` +
          (notes.length ? ` ${notes.join(" ")}` : "");
      }
    }

    function schedule(announce) {
      // fast typing: each change supersedes the last; one prediction per frame, for the latest prompt.
      // A writing under way sees the generation move on and stops.
      generation++;
      pendingAnnounce = announce;
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
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
      const tau = Number(temperature.value), k = Number(topK.value);
      const out = [];
      let state = null, caches = null, recent = tokens.slice(-(model.config.context || LSTM_LIMIT));
      let logitsRow = null;
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
          const id = draw(distribution(logitsRow, tau, k).probs);
          out.push(id);
          if (model.kind === "lstm") ({ logits: logitsRow, state } = lstmStep(model, state, id));
          else if (recent.length < model.config.context) {
            recent.push(id);
            logitsRow = gptStep(model, caches, id).logits; // the window fills: one position through the KV cache
          } else {
            // the window slides: every position moves, so no cached key or value applies; reread it in one pass
            recent = [...recent.slice(1), id];
            logitsRow = gptForward(model, recent).logits;
          }
        }
        written.textContent = out.map((i) => model.vocab[i]).join("");
        if (out.length < 200) setTimeout(chunk, 0);
        else status.textContent = `Wrote 200 characters at temperature ${tau}, top-k ${k}.`;
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
      topK.addEventListener("input", () => schedule("prediction"));
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

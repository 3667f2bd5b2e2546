/* Explorations (markup and frames: lessonlib/engine/worker/exploration.py); the lessonlib plugin
   adds this script to every site, after page-view.js. Without this script an
   exploration is its frames one after another; with it, its native control (a range input or a
   group of radio buttons) is shown and picks the one frame on view, and the live region
   announces the state and that frame's finding (its alt text). */
(function () {
  "use strict";

  function setUp(root) {
    // Called on every page view (page-view.js): a widget already set up is left as it is.
    if (root.dataset.explorationReady) return;

    const frames = [...root.querySelectorAll(".lessonlib-exploration__frame")];
    const status = root.querySelector(".lessonlib-exploration__status");
    const range = root.querySelector('input[type="range"]');
    const radios = [...root.querySelectorAll('input[type="radio"]')];
    const shown = root.querySelector(".lessonlib-exploration__value");
    const name = root.querySelector(".lessonlib-exploration__label").textContent.trim();

    function show(n, announce) {
      frames.forEach((frame, i) => frame.classList.toggle("is-current", i === n));
      const frame = frames[n];
      const label = frame.dataset.label;
      if (range) {
        range.value = String(n);
        range.setAttribute("aria-valuetext", label);
        shown.textContent = label;
      }
      radios.forEach((radio, i) => (radio.checked = i === n));
      root.dataset.frame = String(n);
      // Filled in silently on load (nothing has changed yet); announced when the reader moves it.
      const text = `${name}: ${label} (${n + 1} of ${frames.length}). ${frame.querySelector("img").alt}`;
      if (announce) status.textContent = text;
    }

    if (range) range.addEventListener("input", () => show(Number(range.value), true));
    radios.forEach((radio, i) => radio.addEventListener("change", () => radio.checked && show(i, true)));

    show(Number(root.dataset.start || 0), false);
    root.querySelector(".lessonlib-exploration__controls").hidden = false;
    // Set last, once the control works: the state tests (and other scripts) can wait for.
    root.dataset.explorationReady = "true";
  }

  function setUpAll() {
    document.querySelectorAll(".lessonlib-exploration").forEach(setUp);
  }

  lessonlibOnPageView(setUpAll);
})();

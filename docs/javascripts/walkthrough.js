/* Step-by-step player for the LSTM walkthrough (markup and numbers: lessonlib/figures/walkthrough.py).
   Without this script the widget is its static table; with it, the player above the table is
   shown and steps through the same data, read from the widget's data-steps attribute (JSON). */
(function () {
  "use strict";

  const PLAY_INTERVAL_MS = 2500;
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");

  function setUp(root) {
    // Called on every page view (page-view.js): a widget already set up is left as it is.
    if (root.dataset.walkthroughReady) return;

    const part = (name) => root.querySelector(".lstm-walkthrough__" + name);
    const steps = JSON.parse(root.dataset.steps);
    const last = steps.length - 1;
    const live = part("live");
    const diagram = part("diagram");
    const boxes = root.querySelectorAll(".lstm-walkthrough__box");
    const rows = root.querySelectorAll(".lstm-walkthrough__table tbody tr");
    const button = (action) => root.querySelector(`button[data-action="${action}"]`);
    const previous = button("previous");
    const play = button("play");
    const next = button("next");
    let current = 0;
    let timer = null;

    function show(n) {
      current = n;
      const step = steps[n];
      part("status").textContent = `Step ${n + 1} of ${steps.length}: ${step.title}`;
      part("formula").textContent = step.formula;
      part("plugged").textContent = step.plugged;
      part("result").textContent = step.result;
      diagram.setAttribute(
        "aria-label",
        "Values so far: " + steps.slice(0, n + 1).map((s) => s.result).join("; ")
      );
      for (const box of boxes) {
        const at = Number(box.dataset.step);
        box.classList.toggle("is-shown", at <= n);
        box.classList.toggle("is-current", at === n);
      }
      for (const row of rows) {
        const isCurrent = Number(row.dataset.step) === n;
        row.classList.toggle("is-current", isCurrent);
        if (isCurrent) row.setAttribute("aria-current", "step");
        else row.removeAttribute("aria-current");
      }
      // aria-disabled, not disabled: a disabled button would drop the keyboard focus.
      previous.setAttribute("aria-disabled", String(n === 0));
      next.setAttribute("aria-disabled", String(n === last));
      if (!reducedMotion.matches) {
        live.animate([{ opacity: 0.3 }, { opacity: 1 }], { duration: 250, easing: "ease-out" });
      }
    }

    function pause() {
      clearInterval(timer);
      timer = null;
      play.textContent = "Play";
    }

    function advance() {
      // After instant navigation the widget may be gone; stop instead of ticking forever.
      if (!root.isConnected) return pause();
      show(current === last ? 0 : current + 1);
      if (current === last) pause();
    }

    function startPlaying() {
      play.textContent = "Pause";
      advance();
      if (current !== last) timer = setInterval(advance, PLAY_INTERVAL_MS);
    }

    function go(n) {
      pause(); // a reader who steps by hand takes over from the autoplay
      if (n >= 0 && n <= last) show(n);
    }

    previous.addEventListener("click", () => go(current - 1));
    next.addEventListener("click", () => go(current + 1));
    play.addEventListener("click", () => (timer ? pause() : startPlaying()));
    root.addEventListener("keydown", (event) => {
      if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
      if (event.key === "ArrowLeft") go(current - 1);
      else if (event.key === "ArrowRight") go(current + 1);
      else return;
      event.preventDefault();
    });

    show(0); // filled in while hidden, so the live region does not announce the page load
    part("player").hidden = false;
    // Set last, once the player works: the state tests (and other scripts) can wait for.
    root.dataset.walkthroughReady = "true";
  }

  function setUpAll() {
    document.querySelectorAll(".lstm-walkthrough").forEach(setUp);
  }

  lessonlibOnPageView(setUpAll);
})();

/* Accessibility fixes the theme leaves to the site (axe-core checks them in tests/test_site_browser.py):
   - the search dialog gets a name;
   - a box that scrolls sideways (wide math, a long line of code in the notebook or in a
     collapsed answer, a figure at its own size on a phone) can be reached and scrolled with the
     keyboard: it becomes focusable, with a name (and a role, where it has none). Whether a box
     scrolls depends on the window's width, on whether its <details> or tab is open and on its
     images' sizes, so this is redone whenever one of those changes, once the page's images have
     loaded.
   Once done for the page on view, <html data-lessonlib-ready> holds the page's path, and
   data-lessonlib-checks counts the checks done so far: tests (and any other script) wait for
   those states, not for the load event, which comes before Material's document$ on a first
   visit and not at all after instant navigation. */
(function () {
  "use strict";

  const CANDIDATES = ".md-content :is(div, pre, code, .lessonlib-figure)";
  const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";

  function kind(box) {
    if (box.matches(".lessonlib-figure")) return "Figure";
    if (box.matches(".arithmatex")) return "Formula";
    return box.querySelector("table") ? "Table" : "Code";
  }

  function nameSearchDialog() {
    const dialog = document.querySelector('.md-search[role="dialog"]');
    if (dialog && !dialog.hasAttribute("aria-label")) dialog.setAttribute("aria-label", "Search");
  }

  // Something on view in the box that takes focus brings the box's scroll along with it; one of
  // our scrollers (a wide table inside a wide figure) scrolls itself, not the box, and one in a
  // closed <details> takes no focus.
  function reachableWithin(box) {
    return [...box.querySelectorAll(FOCUSABLE)]
      .some((element) => !("lessonlibScroller" in element.dataset) && element.getClientRects().length > 0);
  }

  function scrollsSideways(box) {
    const overflow = getComputedStyle(box).overflowX;
    return (overflow === "auto" || overflow === "scroll") && box.scrollWidth > box.clientWidth;
  }

  let checks = 0;

  function makeScrollersFocusable() {
    for (const box of document.querySelectorAll(CANDIDATES)) {
      const ours = "lessonlibScroller" in box.dataset;
      if (scrollsSideways(box)) {
        if (ours || box.hasAttribute("tabindex") || reachableWithin(box)) continue;
        box.tabIndex = 0;
        // a figure (or an exploration's frame, a list item) keeps its own role
        if (!box.matches(".lessonlib-figure")) box.setAttribute("role", "group");
        box.setAttribute("aria-label", kind(box) + ", scrolls sideways");
        box.dataset.lessonlibScroller = "";
      } else if (ours) {
        // wider window: no longer a stop on the Tab path
        ["tabindex", "role", "aria-label", "data-lessonlib-scroller"].forEach((a) => box.removeAttribute(a));
      }
    }
    document.documentElement.dataset.lessonlibChecks = String(++checks);
  }

  let views = 0;

  async function setUp() {
    const view = ++views;
    nameSearchDialog();
    // a figure scrolls once its image has its size
    const images = [...document.querySelectorAll(".md-content img")];
    await Promise.all(images.map((image) => image.decode().catch(() => {})));
    if (view !== views) return; // the reader has moved on to another page meanwhile
    makeScrollersFocusable();
    document.documentElement.dataset.lessonlibReady = location.pathname;
  }

  let pending = null;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(pending); // many events while a window is resized: check once per frame
    pending = requestAnimationFrame(makeScrollersFocusable);
  });
  document.addEventListener("toggle", makeScrollersFocusable, true); // <details> opened or closed (does not bubble)
  document.addEventListener("change", makeScrollersFocusable); // a tab chosen (pymdownx.tabbed: radio inputs)

  lessonlibOnPageView(setUp);
})();

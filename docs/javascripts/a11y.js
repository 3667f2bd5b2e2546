/* Accessibility fixes the theme leaves to the site (axe-core checks them in tests/test_site_browser.py):
   - the search dialog gets a name;
   - a box that scrolls sideways (wide math, a long line in the notebook's code) can be reached
     and scrolled with the keyboard: it becomes focusable, with a role and a name. Whether a box
     scrolls depends on the window's width, so this is redone when the width changes.
   Once done for the page on view, <html data-lessonlib-ready> holds the page's path: tests (and
   any other script) wait for that state, not for the load event, which comes before Material's
   document$ on a first visit and not at all after instant navigation. */
(function () {
  "use strict";

  const SCROLLERS = {
    "div.arithmatex": "Formula, scrolls sideways",
    ".highlight-ipynb": "Code, scrolls sideways",
  };

  function nameSearchDialog() {
    const dialog = document.querySelector('.md-search[role="dialog"]');
    if (dialog && !dialog.hasAttribute("aria-label")) dialog.setAttribute("aria-label", "Search");
  }

  function makeScrollersFocusable() {
    for (const [selector, label] of Object.entries(SCROLLERS)) {
      for (const box of document.querySelectorAll(".md-content " + selector)) {
        const scrolls = box.scrollWidth > box.clientWidth;
        if (scrolls && !box.hasAttribute("tabindex")) {
          box.tabIndex = 0;
          box.setAttribute("role", "group");
          box.setAttribute("aria-label", label);
          box.dataset.lessonlibScroller = "";
        } else if (!scrolls && "lessonlibScroller" in box.dataset) {
          // wider window, no scrolling: no longer a stop on the Tab path
          ["tabindex", "role", "aria-label", "data-lessonlib-scroller"].forEach((a) => box.removeAttribute(a));
        }
      }
    }
  }

  function setUp() {
    nameSearchDialog();
    makeScrollersFocusable();
    document.documentElement.dataset.lessonlibReady = location.pathname;
  }

  let pending = null;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(makeScrollersFocusable);
  });

  if (typeof document$ !== "undefined") document$.subscribe(setUp);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();

/* lessonlibOnPageView(setUp) runs setUp on every page view. Material's document$ emits on each
   one, instant navigation included; without the theme's script, setUp runs once the page has
   loaded. Listed first in mkdocs.yml: the other scripts call it. */
window.lessonlibOnPageView = function (setUp) {
  "use strict";
  if (typeof document$ !== "undefined") document$.subscribe(setUp);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
};

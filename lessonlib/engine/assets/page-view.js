/* lessonlibOnPageView(setUp) runs setUp on every page view. Material's document$ emits on each
   one, instant navigation included; without the theme's script, setUp runs once the page has
   loaded. The lessonlib plugin adds it to every site before the site's own scripts, which may call it. */
window.lessonlibOnPageView = function (setUp) {
  "use strict";
  if (typeof document$ !== "undefined") document$.subscribe(setUp);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
};

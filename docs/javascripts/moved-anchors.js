/* Lesson 1 became two lessons (moved.yml at the repository's root). Its old address redirects to
   the first, recurrent-networks, keeping the anchor; an anchor whose section moved to the second
   lesson is sent on there. MOVED lists those anchors (tests/test_moved.py keeps it in step with
   moved.yml). */
lessonlibOnPageView(function () {
  "use strict";
  const MOVED = ["lstm", "forget-gate", "gru", "walkthrough", "limits", "attention"];
  const here = /\/lessons\/recurrent-networks\/$/;
  const anchor = decodeURIComponent(location.hash.slice(1));
  if (here.test(location.pathname) && MOVED.includes(anchor) && !document.getElementById(anchor)) {
    location.replace(location.pathname.replace(here, "/lessons/gates-and-attention/") + location.hash);
  }
});

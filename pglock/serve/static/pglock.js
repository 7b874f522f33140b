// pglock serve: refresh a page that asks for it (data-refresh, in seconds) without a full
// reload: fetch it again and swap its <main>. No framework, no build step, no inline code.
"use strict";
(function () {
  const seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) {
    return;
  }
  async function refresh() {
    try {
      const response = await fetch(window.location.href, {credentials: "same-origin"});
      if (response.ok) {
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        const main = fresh.getElementById("main");
        if (main) {
          document.getElementById("main").replaceWith(main);
        }
      }
    } catch (error) {
      // The next round tries again; the page keeps what it shows.
    }
    window.setTimeout(refresh, seconds * 1000);
  }
  window.setTimeout(refresh, seconds * 1000);
})();

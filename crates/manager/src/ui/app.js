// Corral's dashboard: follows the logs of a running session. Each <pre data-follow="true">
// asks for the bytes after data-offset; the manager holds the request until there are some
// or the session ends (the x-corral-ended header), so this is not a busy loop.
"use strict";

async function follow(pre) {
  let offset = Number(pre.dataset.offset || "0");
  for (;;) {
    let response;
    try {
      response = await fetch(pre.dataset.url + "?offset=" + offset, { credentials: "same-origin" });
    } catch (e) {
      await new Promise((r) => setTimeout(r, 2000)); // the manager restarts: ask again
      continue;
    }
    if (!response.ok) {
      pre.dataset.follow = "stopped";
      return;
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (bytes.length > 0) {
      pre.append(new TextDecoder().decode(bytes));
      offset += bytes.length;
      pre.dataset.offset = String(offset);
      pre.scrollTop = pre.scrollHeight;
    }
    if (response.headers.get("x-corral-ended") === "true" && bytes.length === 0) {
      pre.dataset.follow = "ended";
      // The session ended while the page was open: show its final state once.
      if (!sessionStorage.getItem("reloaded:" + location.pathname)) {
        sessionStorage.setItem("reloaded:" + location.pathname, "1");
        location.reload();
      }
      return;
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("pre.log[data-follow='true']").forEach(follow);
});

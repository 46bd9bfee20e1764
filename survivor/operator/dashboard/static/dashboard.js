// survivor dashboard: re-fetches the page it is on every data-refresh-ms and swaps in the new <main>.
// The new page is parsed by DOMParser (which runs no script) and its nodes adopted as they are: the
// server escaped every value, and the Content-Security-Policy forbids any script but this file.
(function () {
  "use strict";
  var every = parseInt(document.body.getAttribute("data-refresh-ms"), 10) || 10000;
  var status = document.getElementById("connection");

  function refresh() {
    fetch(window.location.href, { headers: { "Accept": "text/html" }, cache: "no-store", credentials: "omit" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html");
        var main = next.getElementById("main");
        var stamp = next.getElementById("read-at");
        if (main) { document.getElementById("main").replaceWith(document.adoptNode(main)); }
        if (stamp) { document.getElementById("read-at").textContent = stamp.textContent; }
        if (next.title) { document.title = next.title; }
        status.textContent = "";
      })
      .catch(function (error) {
        status.textContent = "not refreshed: " + error.message;
      })
      .finally(function () { window.setTimeout(refresh, every); });
  }
  window.setTimeout(refresh, every);
})();

// takt dashboard: a little progressive JavaScript, no build step, no dependency.
// Without it every page still works (times show in UTC, pages do not refresh themselves).
"use strict";
(function () {
  // Times in the browser's zone: every <time datetime> gets its local text; the UTC text
  // the server wrote stays as the tooltip.
  function localTimes(root) {
    var fmt;
    try {
      fmt = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
        year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit",
        hour12: false, timeZoneName: "short"
      });
    } catch (e) { return; }
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.done) { return; }
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) { return; }
      el.title = el.textContent;
      el.textContent = fmt.format(d);
      el.dataset.done = "1";
    });
  }

  // Live pages (<body data-refresh="N">): every N seconds the page is fetched again and its
  // [data-live] sections are swapped in place; paused while the user types in a form or the
  // tab is hidden, stopped when the session has ended (the fetch lands on the sign-in page).
  function refresh() {
    var secs = parseInt(document.body.dataset.refresh || "0", 10);
    if (!secs) { return; }
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) { return; }
      var a = document.activeElement;
      if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) { return; }
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.redirected && r.url.indexOf("/ui/signin") >= 0) { location.href = r.url; return null; }
          return r.text();
        })
        .then(function (html) {
          if (!html) { return; }
          var doc = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-live][id]").forEach(function (el) {
            var fresh = doc.getElementById(el.id);
            if (fresh) { el.replaceWith(fresh); localTimes(fresh); }
          });
          var banner = document.getElementById("outage");
          var freshBanner = doc.getElementById("outage");
          if (freshBanner && !banner) { document.querySelector("main").before(freshBanner); }
          if (banner && !freshBanner) { banner.remove(); }
        })
        .catch(function () { /* the server is restarting: try again at the next tick */ })
        .then(function () { busy = false; });
    }, secs * 1000);
  }

  // The live log tail of a run page: the log's own Server-Sent Events stream.
  function logTail() {
    var pre = document.getElementById("log");
    if (!pre || !pre.dataset.stream || !window.EventSource) { return; }
    var status = document.getElementById("log-status");
    var es = new EventSource(pre.dataset.stream);
    if (status) { status.textContent = status.dataset.liveText; }
    es.addEventListener("log", function (e) {
      var l = JSON.parse(e.data);
      var span = document.createElement("span");
      span.className = "lv-" + l.level;
      span.textContent = l.at.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC") + " " + l.level + " " + l.message;
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(span);
      pre.appendChild(document.createTextNode("\n"));
      if (atEnd) { pre.scrollTop = pre.scrollHeight; }
    });
    es.addEventListener("end", function () {
      es.close();
      if (status) { status.textContent = status.dataset.endText; }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    refresh();
    logTail();
  });
})();

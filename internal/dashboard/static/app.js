// Progressive enhancement only: every page works without this script.
(function () {
  "use strict";
  // Tell the server the viewer's time zone, so the next pages render their
  // times in it; rewrite this page's times now.
  try {
    var tz = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (tz && document.cookie.indexOf("dash_tz=" + encodeURIComponent(tz)) < 0) {
      document.cookie = "dash_tz=" + encodeURIComponent(tz) + "; path=/dashboard; max-age=31536000; samesite=lax";
    }
    var fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) { el.title = el.textContent; el.textContent = fmt.format(d); }
    });
  } catch (e) { /* old browser: the server's rendering stays */ }

  // Copy buttons: data-copy names the input whose value to copy.
  document.querySelectorAll("button[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var input = document.getElementById(btn.getAttribute("data-copy"));
      if (!input) { return; }
      input.select();
      var done = function () { btn.textContent = "Copied"; setTimeout(function () { btn.textContent = "Copy"; }, 2000); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
      } else { document.execCommand("copy"); done(); }
    });
  });
})();

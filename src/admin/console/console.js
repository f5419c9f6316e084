// floodgate web console: the action buttons. Each button posts to its data-action URL
// with this session's CSRF value in the X-Floodgate-CSRF header (read from the page; the
// session cookie alone never authorises an action). A first click arms the button, a
// second one within five seconds sends. Each button sends its row's reason field when it
// is filled; a button with data-reason needs it (refused empty). A ticked confirm box of
// its row sends confirm=true (the box shows when the server answers that the release needs
// it). The Held page's header box ticks every row of the page. Everything else in the
// console works without it.
"use strict";
(function () {
  const meta = document.querySelector('meta[name="floodgate-csrf"]');
  const csrf = meta ? meta.getAttribute("content") : "";
  function say(text, bad) {
    const status = document.getElementById("status");
    if (!status) return;
    status.textContent = text;
    status.className = bad ? "status bad" : "status ok";
  }
  function disarm(b) {
    b.classList.remove("armed");
    b.textContent = b.dataset.label;
  }
  async function send(b) {
    let url = b.dataset.action;
    const row = b.closest("[data-row]");
    const input = row ? row.querySelector("input.reason") : null;
    const reason = input ? input.value.trim() : "";
    if (b.dataset.reason && !reason) {
      say("Say why first (the reason field): it is logged and sent with the alert.", true);
      return;
    }
    if (reason) {
      url += (url.indexOf("?") >= 0 ? "&" : "?") + "reason=" + encodeURIComponent(reason);
    }
    // Ticked after the server warned that the key is still restricted.
    const confirmed = row ? row.querySelector("input.confirm") : null;
    if (confirmed && confirmed.checked) {
      url += (url.indexOf("?") >= 0 ? "&" : "?") + "confirm=true";
    }
    b.disabled = true;
    try {
      const resp = await fetch(url, {
        method: "POST",
        headers: { "X-Floodgate-CSRF": csrf },
        credentials: "same-origin",
        cache: "no-store",
      });
      const body = await resp.json().catch(function () { return {}; });
      if (resp.ok) {
        say(body.message || "done", false);
        if (row) {
          row.classList.add("done");
          row.querySelectorAll("button.act").forEach(function (x) { x.disabled = true; });
        }
      } else {
        say(body.error || "the server answered " + resp.status, true);
        // Still restricted: show the box that confirms the release.
        const box = body.confirm && row ? row.querySelector("label.confirm") : null;
        if (box) box.hidden = false;
        b.disabled = false;
      }
    } catch (e) {
      say("the request failed: " + e, true);
      b.disabled = false;
    }
  }
  // The Held page's box that ticks every row of the page (hidden without script: the
  // form's "every message on this page" does the same).
  document.querySelectorAll("input.pick-all").forEach(function (all) {
    all.hidden = false;
    all.addEventListener("change", function () {
      const form = all.closest("form");
      if (!form) return;
      form.querySelectorAll("input[type=checkbox][name=id]").forEach(function (b) {
        b.checked = all.checked;
      });
    });
  });
  document.addEventListener("click", function (ev) {
    const b = ev.target.closest ? ev.target.closest("button.act") : null;
    if (!b || b.disabled) return;
    ev.preventDefault();
    if (!b.dataset.label) b.dataset.label = b.textContent;
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = b.dataset.confirm || "Sure?";
      setTimeout(function () { disarm(b); }, 5000);
      return;
    }
    disarm(b);
    send(b);
  });
})();

// idem's dashboard script: no framework, no build step. It
// - keeps the API token (when auth is on) in this browser's storage and sends it as a Bearer
//   header, never in a URL;
// - turns links and forms under /ui into requests that swap the page, pushing real URLs, so
//   every page has a permalink;
// - refreshes the page's live section every few seconds until paused (and while the tab is
//   hidden it does not).
"use strict";
(() => {
  const TOKEN = "idem-token";
  const PAUSED = "idem-paused";
  let timer = null;

  const token = () => localStorage.getItem(TOKEN);

  async function request(url, method = "GET", body = null) {
    const headers = { "idem-ui": "1" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    if (body) headers["content-type"] = "application/x-www-form-urlencoded";
    return fetch(url, { method, headers, body, credentials: "same-origin", redirect: "follow" });
  }

  function parse(html) {
    return new DOMParser().parseFromString(html, "text/html");
  }

  // Loads `url` and shows it; `push` adds a history entry.
  async function load(url, { method = "GET", body = null, push = false } = {}) {
    let response;
    try {
      response = await request(url, method, body);
    } catch (e) {
      flash("idem did not answer: " + e.message);
      return;
    }
    const doc = parse(await response.text());
    if (response.status === 401 && token()) localStorage.removeItem(TOKEN);
    const next = doc.getElementById("app");
    if (!next) {
      flash("Unexpected answer (HTTP " + response.status + ")");
      return;
    }
    document.title = doc.title;
    document.getElementById("app").replaceWith(next);
    const shown = response.headers.get("idem-location") || (method === "GET" ? url : location.pathname + location.search);
    if (push) history.pushState({}, "", shown);
    else if (shown !== location.pathname + location.search) history.replaceState({}, "", shown);
    if (push) window.scrollTo(0, 0);
    bind();
  }

  function flash(text) {
    const main = document.querySelector("main");
    if (!main) return;
    const p = document.createElement("p");
    p.className = "notice error";
    p.setAttribute("role", "alert");
    p.textContent = text;
    main.prepend(p);
  }

  // Swaps only the live section, keeping scroll and focus.
  async function refresh() {
    const live = document.getElementById("live");
    if (!live || document.hidden || paused()) return;
    try {
      const response = await request(location.pathname + location.search);
      if (!response.ok) return;
      const fresh = parse(await response.text()).getElementById("live");
      if (fresh) {
        live.replaceWith(fresh);
        const stamp = document.querySelector("[data-updated]");
        if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
      }
    } catch (_) {
      /* the next tick tries again */
    }
  }

  const paused = () => sessionStorage.getItem(PAUSED) === "1";

  function showPause() {
    for (const b of document.querySelectorAll("[data-pause]")) {
      b.textContent = paused() ? "Resume live refresh" : "Pause live refresh";
      b.setAttribute("aria-pressed", paused() ? "true" : "false");
    }
  }

  function bind() {
    clearInterval(timer);
    const app = document.getElementById("app");
    if (app && app.dataset.needsToken) {
      const form = document.getElementById("token-form");
      const input = form && form.querySelector("input");
      if (input) input.focus();
      if (form)
        form.addEventListener("submit", (e) => {
          e.preventDefault();
          localStorage.setItem(TOKEN, input.value.trim());
          load(location.pathname + location.search);
        });
      return;
    }
    const live = document.getElementById("live");
    if (live) {
      const seconds = Number(live.dataset.refresh) || 5;
      timer = setInterval(refresh, seconds * 1000);
    }
    showPause();
  }

  document.addEventListener("click", (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const pause = e.target.closest("[data-pause]");
    if (pause) {
      sessionStorage.setItem(PAUSED, paused() ? "0" : "1");
      showPause();
      return;
    }
    if (e.target.closest("[data-sign-out]")) {
      localStorage.removeItem(TOKEN);
      load(location.pathname + location.search);
      return;
    }
    const a = e.target.closest("a[href]");
    if (!a || a.target || a.origin !== location.origin || !a.pathname.startsWith("/ui")) return;
    e.preventDefault();
    load(a.pathname + a.search, { push: true });
  });

  document.addEventListener("submit", (e) => {
    const form = e.target;
    if (!form.hasAttribute("data-ui")) return;
    e.preventDefault();
    const data = new URLSearchParams(new FormData(form));
    const action = new URL(form.getAttribute("action") || location.pathname, location.href);
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    if ((form.getAttribute("method") || "get").toLowerCase() === "post") {
      load(action.pathname, { method: "POST", body: data.toString(), push: true });
    } else {
      for (const [k, v] of [...data]) if (v === "") data.delete(k);
      const q = data.toString();
      load(action.pathname + (q ? "?" + q : ""), { push: true });
    }
  });

  window.addEventListener("popstate", () => load(location.pathname + location.search));

  const start = () => {
    const app = document.getElementById("app");
    // The server answered with the prompt; with a token kept from before, fetch the page with it.
    if (app && app.dataset.needsToken && token()) load(location.pathname + location.search);
    else bind();
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// The console's script: live refresh and the action buttons. No build
// step, no dependencies.
//
// Live refresh: every 2 s the page asks its own URL again with the ETag of
// the last copy it got (If-None-Match). A 304 means nothing changed; a 200
// brings a new page whose <main> replaces this one's, keeping which
// <details> are open. It waits while someone types in a form of <main>.
"use strict";

(() => {
  const TOKEN_KEY = "trio-durable-token";
  const PERIOD_MS = 2000;
  const base = document.body.dataset.base || "";
  const token = document.getElementById("token");
  const flash = document.getElementById("flash");
  let etag = null;

  token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  token.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, token.value.trim()));

  function say(message, kind) {
    flash.textContent = message;
    flash.className = kind;
    flash.hidden = false;
  }

  // Someone is writing in a form of the page: swapping <main> would lose it.
  function busy(main) {
    const active = document.activeElement;
    if (active && main.contains(active) && active.matches("input, textarea, select")) {
      return true;
    }
    return [...main.querySelectorAll("input, textarea")].some(
      (field) => field.value !== field.defaultValue,
    );
  }

  async function refresh() {
    const main = document.getElementById("main");
    if (document.hidden || busy(main)) return;
    const headers = etag ? { "If-None-Match": etag } : {};
    let response;
    try {
      response = await fetch(location.href, { headers, cache: "no-store" });
    } catch {
      document.getElementById("live").classList.add("offline");
      return;
    }
    document.getElementById("live").classList.remove("offline");
    if (response.status !== 200) return;
    etag = response.headers.get("ETag");
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = page.getElementById("main");
    if (!fresh || busy(main)) return;
    const open = new Map(
      [...main.querySelectorAll("details[data-key]")].map((d) => [d.dataset.key, d.open]),
    );
    for (const details of fresh.querySelectorAll("details[data-key]")) {
      if (open.has(details.dataset.key)) details.open = open.get(details.dataset.key);
    }
    main.replaceChildren(...fresh.childNodes);
    document.title = page.title;
  }

  // A JSON field of a form: its value parsed, null when empty; undefined
  // (and said) when it is not JSON.
  function jsonField(form, name) {
    const raw = form.elements.namedItem(name).value.trim();
    try {
      return raw ? JSON.parse(raw) : null;
    } catch {
      say(`the ${name} is not JSON`, "error");
      return undefined;
    }
  }

  // What each form's action sends: [method, path, body]; undefined when
  // the form's input is refused here.
  function request(form) {
    const action = form.dataset.action;
    const run = `/api/runs/${encodeURIComponent(form.dataset.run || "")}`;
    const field = (name) => form.elements.namedItem(name).value;
    switch (action) {
      case "signal": {
        const payload = jsonField(form, "payload");
        return payload === undefined ? undefined : ["POST", `${run}/signal`, { name: field("name"), payload }];
      }
      case "skip": {
        const output = jsonField(form, "output");
        return output === undefined ? undefined : ["POST", `${run}/skip`, { output }];
      }
      case "cancel":
        return ["POST", `${run}/cancel`, { compensate: form.dataset.compensate === "true" }];
      case "retry-from":
        return ["POST", `${run}/retry`, { from_seq: Number(field("from_seq")) }];
      case "fork":
        return [
          "POST",
          `${run}/fork`,
          { from_seq: Number(field("from_seq")), new_run_id: field("new_run_id").trim() || null },
        ];
      case "set-breakpoint":
        return ["POST", "/api/breakpoints", { workflow: field("workflow"), step: field("step") }];
      case "clear-breakpoint":
        return ["DELETE", `/api/breakpoints/${encodeURIComponent(form.dataset.breakpoint)}`, null];
      default: // retry, continue
        return ["POST", `${run}/${action}`, {}];
    }
  }

  async function act(form) {
    const action = form.dataset.action;
    const asked = request(form);
    if (asked === undefined) return;
    const [method, path, body] = asked;
    const headers = { "Content-Type": "application/json" };
    if (token.value.trim()) headers.Authorization = `Bearer ${token.value.trim()}`;
    let response;
    try {
      response = await fetch(base + path, {
        method,
        headers,
        body: body === null ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      say(`the console did not answer: ${error}`, "error");
      return;
    }
    const answer = await response.json().catch(() => null);
    if (response.ok && action === "fork" && answer && answer.run_id) {
      // The fork is a run of its own: show its page.
      window.location.assign(`${base}/runs/${encodeURIComponent(answer.run_id)}`);
      return;
    }
    if (response.ok) {
      say(`${action}: accepted`, "ok");
      form.reset();
      refresh();
    } else {
      const message = answer && answer.error ? answer.error.message : response.statusText;
      say(`${action} refused (${response.status}): ${message}`, "error");
    }
  }

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-action]");
    if (!form) return;
    event.preventDefault();
    act(form);
  });

  setInterval(refresh, PERIOD_MS);
})();

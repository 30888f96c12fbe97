// The console's script: live refresh, the action buttons, the JSON
// viewer and relative times. No build step, no dependencies.
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
    main.replaceChildren(...fresh.childNodes);
    enhance(main);
    // After the viewers are drawn: their nodes are details too.
    for (const details of main.querySelectorAll("details[data-key]")) {
      if (open.has(details.dataset.key)) details.open = open.get(details.dataset.key);
    }
    document.title = page.title;
  }

  // -- relative times: "3 min ago", the exact time on hover (title) --------

  function ago(seconds) {
    const a = Math.abs(seconds);
    const [n, unit] =
      a < 1 ? [Math.round(a * 1000), "ms"]
      : a < 60 ? [Math.round(a), "s"]
      : a < 3600 ? [Math.round(a / 60), "min"]
      : a < 86400 ? [Math.round(a / 3600), "h"]
      : [Math.round(a / 86400), "d"];
    return `${n} ${unit}`;
  }

  function relativeTimes(root) {
    const now = Date.now();
    for (const time of root.querySelectorAll("time.ago[datetime]")) {
      const at = Date.parse(time.getAttribute("datetime"));
      if (Number.isNaN(at)) continue;
      const seconds = (now - at) / 1000;
      if (time.classList.contains("since")) {
        time.textContent = `for ${ago(seconds)}`;
      } else {
        time.textContent = seconds >= 0 ? `${ago(seconds)} ago` : `in ${ago(seconds)}`;
      }
    }
  }

  // -- the JSON viewer: collapsible, long values cut with "show all" -------

  const SHOWN_ITEMS = 50;
  const SHOWN_CHARS = 200;
  const OPEN_DEPTH = 3;
  const shownAll = new Set();

  function showAll(key, node, draw) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "show-all";
    button.textContent = "show all";
    button.addEventListener("click", () => {
      shownAll.add(key);
      node.replaceWith(draw());
    });
    return button;
  }

  function scalar(value, key) {
    const span = document.createElement("span");
    if (value === null) {
      span.className = "j-null";
      span.textContent = "null";
    } else if (typeof value === "string") {
      span.className = "j-string";
      const cut = value.length > SHOWN_CHARS && !shownAll.has(key);
      span.textContent = JSON.stringify(cut ? value.slice(0, SHOWN_CHARS) : value);
      if (cut) {
        span.append(` … (${value.length} characters) `);
        span.append(showAll(key, span, () => scalar(value, key)));
      }
    } else {
      span.className = typeof value === "number" ? "j-number" : "j-boolean";
      span.textContent = JSON.stringify(value);
    }
    return span;
  }

  // A value's node; a label (its key or index) goes in its summary line.
  function tree(value, key, depth, label = null, openDepth = OPEN_DEPTH) {
    if (value === null || typeof value !== "object") {
      const leaf = scalar(value, key);
      if (label === null) return leaf;
      const line = document.createElement("span");
      line.append(label, leaf);
      return line;
    }
    const isArray = Array.isArray(value);
    const items = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
    if (items.length === 0) {
      const empty = document.createElement("span");
      empty.className = "j-empty";
      empty.textContent = isArray ? "[]" : "{}";
      if (label === null) return empty;
      const line = document.createElement("span");
      line.append(label, empty);
      return line;
    }
    const details = document.createElement("details");
    details.className = "j-node";
    details.dataset.key = key;
    details.open = depth < openDepth;
    const summary = document.createElement("summary");
    if (label !== null) summary.append(label);
    summary.append(isArray ? `[ ${items.length} item${items.length === 1 ? "" : "s"} ]` : `{ ${items.length} key${items.length === 1 ? "" : "s"} }`);
    details.append(summary);
    const list = document.createElement("ul");
    const cut = items.length > SHOWN_ITEMS && !shownAll.has(key);
    for (const [name, item] of cut ? items.slice(0, SHOWN_ITEMS) : items) {
      const li = document.createElement("li");
      const label = document.createElement("span");
      label.className = isArray ? "j-index" : "j-key";
      label.textContent = isArray ? `${name}: ` : `${JSON.stringify(name)}: `;
      li.append(tree(item, `${key}/${name}`, depth + 1, label, openDepth));
      list.append(li);
    }
    if (cut) {
      const li = document.createElement("li");
      li.append(`… ${items.length - SHOWN_ITEMS} more `);
      li.append(showAll(key, details, () => tree(value, key, depth, label, openDepth)));
      list.append(li);
    }
    details.append(list);
    return details;
  }

  function viewers(root) {
    for (const view of root.querySelectorAll(".json-view[data-json]")) {
      let value;
      try {
        value = JSON.parse(view.dataset.json);
      } catch {
        continue;
      }
      const key = view.dataset.key || "json";
      const drawn = document.createElement("div");
      drawn.className = "json-tree";
      // In a table's cell, only the outermost level is open.
      drawn.append(tree(value, key, 0, null, view.closest("td") ? 1 : OPEN_DEPTH));
      view.replaceChildren(drawn);
      view.removeAttribute("data-json");
    }
  }

  function enhance(root) {
    viewers(root);
    relativeTimes(root);
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
      case "pause-schedule":
      case "resume-schedule":
      case "trigger-schedule": {
        const verb = action.replace("-schedule", "");
        return ["POST", `/api/schedules/${encodeURIComponent(form.dataset.schedule)}/${verb}`, {}];
      }
      case "set-current-build": {
        const ramp = field("ramp").trim();
        return [
          "POST",
          `/api/deployments/${encodeURIComponent(field("workflow").trim())}/current`,
          { build: field("build").trim(), ramp: ramp === "" ? null : Number(ramp) },
        ];
      }
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

  // -- bulk actions: a dry run's count, a confirmation, then progress ------

  const PAST = { cancel: "cancelled", retry: "retried", terminate: "terminated" };
  const FOLLOW_MS = 500;

  async function send(method, path, body) {
    const headers = { "Content-Type": "application/json" };
    if (token.value.trim()) headers.Authorization = `Bearer ${token.value.trim()}`;
    const response = await fetch(base + path, { method, headers, body: JSON.stringify(body) });
    const answer = await response.json().catch(() => null);
    if (!response.ok) {
      const message = answer && answer.error ? answer.error.message : response.statusText;
      throw new Error(`refused (${response.status}): ${message}`);
    }
    return answer;
  }

  async function bulkCount(form) {
    const action = form.elements.namedItem("bulk_action").value;
    const selection = JSON.parse(form.dataset.selection);
    const code = form.elements.namedItem("code").value.trim();
    if (code) selection.code = code;
    let report;
    try {
      report = await send("POST", `/api/bulk/${action}`, { selection, dry_run: true });
    } catch (error) {
      say(`${action}: ${error.message}`, "error");
      return;
    }
    if (report.matched === 0) {
      say(`${action}: no run of this filter to ${action}`, "ok");
      return;
    }
    confirmBulk(action, selection, report);
  }

  // A dialog outside <main>, so that a live refresh keeps it.
  function confirmBulk(action, selection, report) {
    document.getElementById("bulk-confirm")?.remove();
    flash.hidden = true;
    const dialog = document.createElement("dialog");
    dialog.id = "bulk-confirm";
    const question = document.createElement("p");
    question.textContent = `${action} ${report.matched} runs?`;
    const first = document.createElement("p");
    const more = report.matched - report.first_ids.length;
    first.className = "note";
    first.textContent = `first: ${report.first_ids.join(" ")}${more > 0 ? ` (and ${more} more)` : ""}`;
    const no = document.createElement("button");
    no.type = "button";
    no.textContent = "Cancel";
    no.addEventListener("click", () => dialog.remove());
    const yes = document.createElement("button");
    yes.type = "button";
    yes.id = "bulk-go";
    yes.textContent = `${action} ${report.matched} runs`;
    yes.addEventListener("click", () => {
      dialog.remove();
      startBulk(action, selection);
    });
    dialog.append(question, first, no, " ", yes);
    document.body.append(dialog);
    dialog.showModal();
  }

  async function startBulk(action, selection) {
    let operation;
    try {
      operation = await send("POST", `/api/bulk/${action}`, { selection });
    } catch (error) {
      say(`${action}: ${error.message}`, "error");
      return;
    }
    // Its filters stay in the page's link; the form's own fields go back
    // to their defaults, or the live refresh would wait for them forever.
    document.getElementById("bulk-form")?.reset();
    const progress = operation.progress;
    while (operation.state === "running") {
      const bar = document.createElement("progress");
      bar.max = Math.max(operation.total, 1);
      bar.value = operation.done;
      say(`${action}: ${operation.done} of ${operation.total} runs `, "ok");
      flash.append(bar);
      await new Promise((resolve) => setTimeout(resolve, FOLLOW_MS));
      try {
        const response = await fetch(progress, { cache: "no-store" });
        if (!response.ok) throw new Error(response.statusText);
        operation = await response.json();
      } catch (error) {
        say(`${action}: the console did not answer: ${error}`, "error");
        return;
      }
    }
    if (operation.state === "finished") {
      say(`${action}: ${PAST[action]} ${operation.report.acted} runs (operation ${operation.report.operation})`, "ok");
    } else {
      say(`${action}: ${operation.state}${operation.error ? `: ${operation.error}` : ""}`, "error");
    }
    refresh();
  }

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-action]");
    if (!form) return;
    event.preventDefault();
    if (form.dataset.action === "bulk") bulkCount(form);
    else act(form);
  });

  enhance(document.getElementById("main"));
  setInterval(refresh, PERIOD_MS);
  setInterval(() => relativeTimes(document.getElementById("main")), 1000);
})();

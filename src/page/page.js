"use strict";
// The task table (filter, sort, page) and the transcript view of report.html. Every
// value from the run is put into the page with textContent, never as markup.
(function () {
  const PAGE_ROWS = 100;
  const data = JSON.parse(document.getElementById("ab-table").textContent);
  const inlineEl = document.getElementById("ab-transcripts");
  const inline = inlineEl ? JSON.parse(inlineEl.textContent) : null;
  const C = {};
  data.columns.forEach((c, i) => { C[c] = i; });
  const ALL_COLUMNS = [
    ["task", "task"], ["variant", "variant"], ["epoch", "epoch", "num"], ["team", "team"],
    ["outcome", "outcome"], ["stop", "stop reason"], ["turns", "turns", "num"],
    ["calls", "calls", "num"], ["denied", "denied", "num"], ["errors", "tool errors", "num"],
    ["retries", "retries", "num"], ["cost", "cost $", "num"], ["in", "tokens in", "num"],
    ["out", "tokens out", "num"], ["wall", "wall s", "num"], ["env", "container s", "num"],
  ];
  const LEVELS = ["variant", "team", "outcome", "stop", "model", "image"];
  // Columns that say nothing in this run (one variant, one team, one epoch) are left out.
  const SHOWN = ALL_COLUMNS.filter(([col]) => {
    if (col === "variant" || col === "team") return data[col].length > 1;
    if (col === "epoch") return data.rows.some((r) => r[C.epoch] !== 1);
    if (col === "env") return data.rows.some((r) => r[C.env] !== null);
    return true;
  });
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  const value = (row, col) => {
    const v = row[C[col]];
    return LEVELS.includes(col) ? data[col][v] : v;
  };
  const state = { sort: null, dir: 1, page: 0, rows: [] };

  const filters = [["outcome", "f-outcome"], ["stop", "f-stop"], ["team", "f-team"], ["variant", "f-variant"]];
  for (const [col, id] of filters) {
    const sel = $(id);
    data[col].forEach((name, i) => {
      const o = el("option", null, name === "" ? "(none)" : name);
      o.value = String(i);
      sel.appendChild(o);
    });
    if (data[col].length < 2) sel.parentElement.hidden = true;
    sel.addEventListener("change", () => { state.page = 0; refresh(); });
  }
  $("f-text").addEventListener("input", () => { state.page = 0; refresh(); });

  const head = $("tasks").tHead.rows[0];
  for (const [col, label, cls] of SHOWN) {
    const th = el("th", cls, label);
    th.dataset.col = col;
    th.scope = "col";
    th.addEventListener("click", () => {
      state.dir = state.sort === col ? -state.dir : (cls === "num" ? -1 : 1);
      state.sort = col;
      state.page = 0;
      refresh();
    });
    head.appendChild(th);
  }
  $("prev").addEventListener("click", () => { state.page--; draw(); });
  $("next").addEventListener("click", () => { state.page++; draw(); });

  function refresh() {
    const want = {};
    for (const [col, id] of filters) want[col] = $(id).value;
    const text = $("f-text").value.trim().toLowerCase();
    let idx = [];
    data.rows.forEach((row, i) => {
      for (const [col] of filters) {
        if (want[col] !== "" && String(row[C[col]]) !== want[col]) return;
      }
      if (text && !String(row[C.task]).toLowerCase().includes(text)) return;
      idx.push(i);
    });
    if (state.sort) {
      const col = state.sort, dir = state.dir;
      idx.sort((a, b) => {
        const x = value(data.rows[a], col), y = value(data.rows[b], col);
        if (x === y) return a - b;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
      });
    }
    for (const th of head.cells) {
      th.removeAttribute("aria-sort");
      if (th.dataset.col === state.sort) th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
    }
    state.rows = idx;
    const count = $("count");
    count.dataset.count = String(idx.length);
    count.textContent = idx.length + " of " + data.rows.length + " tasks";
    draw();
  }

  function cell(row, col) {
    const v = value(row, col);
    if (v === null || v === undefined) return "";
    if (col === "cost") return v.toFixed(4);
    if (col === "wall" || col === "env") return (v / 1000).toFixed(1);
    return v;
  }

  function draw() {
    const pages = Math.max(1, Math.ceil(state.rows.length / PAGE_ROWS));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    const body = $("tasks").tBodies[0];
    const frag = document.createDocumentFragment();
    for (const i of state.rows.slice(state.page * PAGE_ROWS, (state.page + 1) * PAGE_ROWS)) {
      const row = data.rows[i];
      const tr = el("tr");
      tr.dataset.i = String(i);
      if (String(i) === openTask) tr.className = "open";
      for (const [col, , cls] of SHOWN) {
        const td = el("td", cls || (col === "task" ? "task" : null), cell(row, col));
        if (col === "outcome") td.classList.add("o-" + value(row, col));
        tr.appendChild(td);
      }
      tr.addEventListener("click", () => open(i));
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    $("page-info").textContent = "page " + (state.page + 1) + " of " + pages;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  // Transcripts: inline, or in chunk scripts beside the page, many tasks each (file://
  // allows a <script src> where it refuses fetch()). A chunk calls abTranscript once
  // per task it holds, with the task's transcript path as its id.
  let openTask = null;
  const lazyEl = document.getElementById("ab-lazy");
  const lazy = lazyEl ? JSON.parse(lazyEl.textContent) : null;
  const views = {};
  const chunks = {};
  window.abTranscript = function (n, id, t) {
    views[id] = t;
  };
  function load(i, done) {
    if (inline) return done(inline[i]);
    const id = lazy.ids[i];
    const n = lazy.chunks[i];
    if (Object.prototype.hasOwnProperty.call(views, id)) return done(views[id]);
    const src = lazyEl.dataset.dir + "/" + n + ".js";
    const missing = (why) => ({ error: why, sections: [] });
    const c = chunks[n] || (chunks[n] = { waiting: [], failed: null });
    if (c.failed) return done(missing(c.failed));
    c.waiting.push(() => done(Object.prototype.hasOwnProperty.call(views, id) ? views[id]
      : missing(c.failed || src + " holds no transcript for this task: write the page again with agentbatch report")));
    if (c.waiting.length > 1) return;
    const s = document.createElement("script");
    s.src = src;
    const settle = () => {
      const w = c.waiting;
      c.waiting = [];
      for (const f of w) f();
    };
    s.onerror = () => {
      c.failed = "cannot load " + src + ": the page needs its folder " + lazyEl.dataset.dir + "/ beside it";
      settle();
    };
    s.onload = () => { s.remove(); settle(); };
    document.body.appendChild(s);
  }

  function open(i) {
    openTask = String(i);
    for (const tr of $("tasks").tBodies[0].rows) tr.classList.toggle("open", tr.dataset.i === openTask);
    const panel = $("transcript");
    panel.hidden = false;
    panel.replaceChildren(el("p", "note", "loading..."));
    load(i, (t) => { if (openTask === String(i)) show(i, t); });
  }

  function show(i, t) {
    const row = data.rows[i];
    const panel = $("transcript");
    panel.replaceChildren();
    panel.dataset.task = String(row[C.task]);
    const h = el("h2", null, "Transcript: ");
    h.appendChild(el("code", null, row[C.task]));
    panel.appendChild(h);
    const image = value(row, "image");
    const facts = [value(row, "model"), value(row, "variant"), image ? "image " + image : "", "outcome " + value(row, "outcome"), "stop " + value(row, "stop")];
    panel.appendChild(el("p", "note", facts.filter((x) => x).join(" · ") + (t.file ? " · " + t.file : "")));
    if (row[C.detail]) panel.appendChild(el("p", "note", "stop detail: " + row[C.detail]));
    if (t.error) panel.appendChild(el("p", "warn", t.error));
    if (t.cut) panel.appendChild(el("p", "warn", "The transcript's last line is cut off (the run was killed while writing it)."));
    if (t.skipped) panel.appendChild(el("p", "warn", t.skipped + " line(s) this version cannot read are shown as unknown or left out."));
    for (const sec of t.sections || []) panel.appendChild(section(sec));
    panel.scrollIntoView();
  }

  function section(sec) {
    const box = el("section", "turn" + (sec.end ? " end" : sec.turn === 0 ? " setup" : ""));
    box.appendChild(el("h3", null, sec.end ? "Stop" : sec.turn === 0 ? "Before the first turn" : "Turn " + sec.turn));
    const events = el("ul", "events");
    const stages = {};
    const names = [["declared", "1 · Tools declared"], ["calls", "2 · Calls received"], ["decisions", "3 · Decisions"], ["results", "4 · Results returned"]];
    const grid = el("div", "stages");
    for (const [k, title] of names) {
      const d = el("div", "stage " + k);
      d.appendChild(el("h4", null, title));
      stages[k] = d;
      grid.appendChild(d);
    }
    const tools = el("ul");
    for (const n of sec.declared || []) tools.appendChild(el("li", "tool", n));
    if (!(sec.declared || []).length) stages.declared.appendChild(el("p", "note", "none"));
    stages.declared.appendChild(tools);
    let staged = false;
    for (const it of sec.items || []) {
      if (it.k === "response") {
        staged = true;
        const a = el("div", "answer");
        for (const th of it.thinking || []) {
          const d = el("details", "thinking");
          d.appendChild(el("summary", null, "thinking"));
          d.appendChild(el("pre", null, th));
          a.appendChild(d);
        }
        if (it.text) a.appendChild(el("pre", "text", it.text));
        if (it.raw) a.appendChild(el("pre", "raw", "not JSON: " + it.raw));
        a.appendChild(el("div", "note", "answer" + (it.stop ? " (" + it.stop + ")" : "") + " in " + it.took + " ms" + (it.replayed ? ", replayed from a killed attempt" : "")));
        stages.calls.appendChild(a);
      } else if (it.k === "call") {
        staged = true;
        const c = el("div", "call");
        c.appendChild(el("code", "call-id", it.id));
        c.appendChild(document.createTextNode(" " + it.name));
        c.appendChild(el("pre", null, it.input));
        stages.calls.appendChild(c);
      } else if (it.k === "result") {
        staged = true;
        const d = el("div", "decision " + (it.decision || "none"));
        d.appendChild(el("code", "call-id", it.id));
        d.appendChild(document.createTextNode(" "));
        d.appendChild(el("b", null, it.decision || "(no decision)"));
        if (it.rule) d.appendChild(document.createTextNode(" · " + it.rule));
        stages.decisions.appendChild(d);
        const r = el("div", "result" + (it.error ? " is-error" : ""));
        r.appendChild(el("code", "call-id", it.id));
        r.appendChild(document.createTextNode(" " + it.name + (it.error ? " (error)" : "") + (it.took !== undefined ? " · " + it.took + " ms" : "")));
        r.appendChild(el("pre", null, it.content));
        stages.results.appendChild(r);
      } else {
        events.appendChild(event(it));
      }
    }
    if (events.children.length) box.appendChild(events);
    if (staged || (!sec.end && sec.turn > 0)) box.appendChild(grid);
    return box;
  }

  function event(it) {
    const li = el("li");
    let name = it.k, text = "", cls = "";
    if (it.k === "request") {
      text = "attempt " + it.attempt + ": " + it.count + " message(s), " + it.bytes + " bytes";
      for (const m of it.messages || []) text += "\n" + m.role + ": " + m.text;
    } else if (it.k === "start") {
      text = it.provider + " / " + it.model + ", max_tokens " + it.max_tokens + (it.toolset ? ", tool set " + it.toolset : "") +
        "\ntools: " + (it.tools || []).join(", ") + ((it.policy || []).length ? "\npolicy: " + it.policy.join("; ") : "") + "\nlimits: " + it.limits;
    } else if (it.k === "stop") {
      text = it.reason + (it.detail ? ": " + it.detail : "");
      cls = "ev-stop";
    } else {
      name = it.name;
      text = it.text;
      cls = "ev-" + it.cls;
    }
    if (cls) li.className = cls;
    li.appendChild(el("span", "k", name));
    li.appendChild(document.createTextNode(text + (it.ms !== undefined ? "  (+" + it.ms + " ms)" : "")));
    return li;
  }

  refresh();
})();

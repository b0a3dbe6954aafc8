"""The case viewer's page (cases.py): its markup, style and script, one HTML text with two slots,
{{TITLE}} (HTML-escaped text) and {{DATA}} (the page's JSON, with <, > and & as \\u escapes).

The script reads the data, builds every element with createElement and puts every text of the run in
with textContent (or as a text node), never as markup, so a candidate that holds <script> or an
<img onerror=...> is shown as the text it is. It draws each step's decision plane as SVG. It fetches
nothing: the page opens offline from a file.
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 8px 14px; background: #f3f3ee; border-bottom: 1px solid #ccc; }
header h1 { font-size: 17px; margin: 0 0 4px 0; }
#filters label { margin-right: 10px; }
#counts, #accuracy { margin-top: 4px; font-size: 13px; }
#accuracy table { border-collapse: collapse; }
#accuracy td, #accuracy th { padding: 1px 6px; border: 1px solid #ddd; }
main { display: flex; height: calc(100vh - 150px); }
#list { width: 230px; overflow-y: auto; border-right: 1px solid #ccc; font-size: 13px; }
.case { padding: 3px 8px; cursor: pointer; border-bottom: 1px solid #eee; }
.case.current { background: #dbe9ff; }
.badge { float: right; font-size: 11px; padding: 0 4px; border-radius: 3px; background: #eee; }
.rw { background: #c8efd0; } .wr { background: #ffd9c4; } .ww { background: #eee; }
#view { flex: 1; overflow-y: auto; padding: 8px 14px; }
#images img { height: 160px; margin: 0 6px 6px 0; border: 1px solid #ccc; }
.gap { color: #a33; font-style: italic; }
pre { white-space: pre-wrap; margin: 4px 0; font: 13px/1.35 ui-monospace, monospace; }
#chains { display: flex; gap: 10px; align-items: flex-start; margin: 8px 0; }
.chain { flex: 1; min-width: 180px; border: 1px solid #ccc; border-radius: 4px; }
.chain.current { border-color: #3a78d8; box-shadow: 0 0 0 1px #3a78d8; }
.chain h3 { margin: 0; padding: 4px 8px; font-size: 14px; background: #f3f3ee; cursor: pointer; }
.chain ol { margin: 0; padding: 4px 8px 6px 26px; }
.chain li { cursor: pointer; padding: 1px 2px; }
.chain li.current { background: #dbe9ff; }
.right { color: #17803a; font-weight: bold; } .wrong { color: #c0392b; font-weight: bold; }
.mark { font-size: 11px; color: #b36200; }
#step table { border-collapse: collapse; margin: 6px 0; }
#step td, #step th { border: 1px solid #ddd; padding: 2px 6px; vertical-align: top; }
#step td.num { text-align: right; font-family: ui-monospace, monospace; }
#step td.text { max-width: 420px; white-space: pre-wrap; }
#step tr.chosen td { background: #e6f6ea; }
#step tr.reasons td { font-size: 12px; color: #555; }
.steprow { display: flex; gap: 12px; align-items: flex-start; }
"""

SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("cases-data").textContent);
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const BADGES = {rw: "A✓ B✗", wr: "A✗ B✓", rr: "A✓ B✓", ww: "A✗ B✗", missing: "?"};
const OUTCOMES = {"": "any outcome", rw: "A right, B wrong", wr: "B right, A wrong",
                  rr: "both right", ww: "both wrong"};

// An element with its attributes; each child is an element or a string, put in as a text node.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of kids) if (c !== null && c !== undefined) e.append(c);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
const fmt = (x) => (x === null || x === undefined ? "—" : Number(x).toFixed(3));
function num(x, field) {
  return el("td", {class: "num", "data-field": field, "data-value": x === null ? "null" : x},
            fmt(x));
}

// Every (item, seed) a row holds is a case.
const CASES = [];
D.items.forEach((it, i) => {
  for (const s of D.seeds) {
    const ran = Object.values(it.rows).some((bySeed) => String(s) in bySeed);
    if (ran) CASES.push({item: i, seed: s});
  }
});
const rowOf = (c, m) => {
  const r = (D.items[c.item].rows[m] || {})[String(c.seed)];
  return r === undefined ? null : D.rows[r];
};
const hasFallback = (r) => !!r && r.steps.some((k) => D.steps[k].fallback);
function outcome(c) {
  const a = rowOf(c, S.a), b = rowOf(c, S.b);
  if (!a || !b) return "missing";
  return (a.correct ? "r" : "w") + (b.correct ? "r" : "w");
}

const judged = D.methods.filter((m) => m !== "base");
const S = {bench: "", a: D.methods.includes("verdict") ? "verdict" : (judged[0] || D.methods[0]),
           b: D.methods.includes("base") ? "base" : D.methods[0], outcome: "", seed: "",
           fallback: false};
const V = {list: [], pos: -1, kase: null, method: S.a, step: 0};

function passes(c, skipOutcome) {
  const it = D.items[c.item];
  if (S.bench && it.data !== S.bench) return false;
  if (S.seed !== "" && String(c.seed) !== S.seed) return false;
  if (S.fallback && !hasFallback(rowOf(c, S.a))) return false;
  return skipOutcome || !S.outcome || outcome(c) === S.outcome;
}

function select(id, options, value, onchange) {
  const s = el("select", {id, onchange: (e) => onchange(e.target.value)});
  for (const [v, text] of options) s.append(el("option", {value: v}, text));
  s.value = value;
  return s;
}
function renderFilters() {
  const f = $("filters");
  f.replaceChildren();
  const files = [["", "every benchmark"], ...D.files.map((x) => [x, x])];
  const methods = D.methods.map((m) => [m, m]);
  const seeds = [["", "every seed"], ...D.seeds.map((s) => [String(s), "seed " + s])];
  const outcomes = Object.entries(OUTCOMES).map(([k, v]) =>
    [k, v.replace("A ", S.a + " ").replace("B ", S.b + " ")]);
  const set = (k) => (v) => { S[k] = v; refilter(); };
  f.append(el("label", {}, "benchmark ", select("f-bench", files, S.bench, set("bench"))),
    el("label", {}, "A ", select("f-a", methods, S.a, (v) => {
      S.a = v; V.method = v; refilter();
    })),
    el("label", {}, "B ", select("f-b", methods, S.b, set("b"))),
    el("label", {}, "outcome ", select("f-outcome", outcomes, S.outcome, set("outcome"))),
    el("label", {}, "seed ", select("f-seed", seeds, S.seed, set("seed"))));
  const box = el("input", {type: "checkbox", id: "f-fallback",
                           onchange: (e) => { S.fallback = e.target.checked; refilter(); }});
  box.checked = S.fallback;
  f.append(el("label", {}, box, " a fallback step in A's chain"));
}

function renderCounts() {
  const n = {rw: 0, wr: 0, rr: 0, ww: 0, missing: 0};
  for (const c of CASES) if (passes(c, true)) n[outcome(c)] += 1;
  const parts = [];
  for (const k of ["rw", "wr", "rr", "ww"]) {
    const label = OUTCOMES[k].replace("A ", S.a + " ").replace("B ", S.b + " ");
    parts.push(el("span", {id: "count-" + k, "data-count": n[k]}, `${label}: ${n[k]}`), " · ");
  }
  parts.push(el("span", {id: "count-shown", "data-count": V.list.length},
                `shown: ${V.list.length} of ${CASES.length} cases`));
  $("counts").replaceChildren(...parts);
}

// Right answers per method, file and seed, counted from the rows, beside summary.json's accuracy.
function renderAccuracy() {
  const t = el("table", {});
  t.append(el("tr", {}, el("th", {}, "method"), el("th", {}, "file"),
    ...D.seeds.map((s) => el("th", {}, `seed ${s}: right / rows (summary.json)`))));
  for (const m of D.methods) for (const f of D.files) {
    const cells = D.seeds.map((s) => {
      let right = 0, total = 0;
      for (const it of D.items) {
        if (it.data !== f) continue;
        const r = (it.rows[m] || {})[String(s)];
        if (r === undefined) continue;
        total += 1; right += D.rows[r].correct ? 1 : 0;
      }
      const cell = D.summary && D.summary[m] && D.summary[m][f];
      const given = cell ? cell[D.seeds.indexOf(s)] : null;
      const said = given === null || given === undefined ? "no summary" : given.toFixed(2) + "%";
      return el("td", {class: "acc", "data-method": m, "data-file": f, "data-seed": s,
                       "data-right": right, "data-total": total}, `${right} / ${total} (${said})`);
    });
    t.append(el("tr", {}, el("td", {}, m), el("td", {}, f), ...cells));
  }
  $("accuracy").replaceChildren(el("details", {}, el("summary", {}, "right answers per seed"), t));
}

function refilter() {
  V.list = CASES.filter((c) => passes(c, false));
  V.pos = V.kase ? V.list.indexOf(V.kase) : -1;
  if (V.pos < 0 && V.list.length) { V.pos = 0; V.kase = V.list[0]; V.step = 0; }
  renderFilters(); renderCounts(); renderList(); renderCase();
}

let listEls = [];
function renderList() {
  listEls = V.list.map((c, k) => {
    const it = D.items[c.item], o = outcome(c);
    return el("div", {class: "case", "data-data": it.data, "data-id": it.id, "data-seed": c.seed,
                      onclick: () => go(k, 0)},
              `${it.data} · ${it.id} · seed ${c.seed}`,
              el("span", {class: "badge " + o, "data-outcome": o}, BADGES[o]));
  });
  $("list").replaceChildren(...listEls);
}

function go(pos, step) {
  if (pos < 0 || pos >= V.list.length) return;
  V.pos = pos; V.kase = V.list[pos]; V.step = step;
  renderCase();
}

function renderCase() {
  listEls.forEach((e, k) => e.classList.toggle("current", k === V.pos));
  if (V.pos >= 0 && listEls[V.pos]) listEls[V.pos].scrollIntoView({block: "nearest"});
  const view = $("view");
  if (!V.kase) {
    view.replaceChildren(el("p", {class: "gap"}, "no case matches"));
    writeHash();
    return;
  }
  const c = V.kase, it = D.items[c.item];
  const images = el("div", {id: "images"}, ...it.images.map((x) =>
    typeof x === "number" ? el("img", {src: D.images[x], alt: `image of item ${it.id}`})
                          : el("p", {class: "gap"}, x)));
  const inputs = el("table", {}, ...Object.entries(it.input).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {}, String(v)))));
  view.replaceChildren(
    el("h2", {id: "case-title"}, `${it.data} · item ${it.id} · seed ${c.seed}`),
    images,
    el("pre", {id: "question"},
       it.question === null ? "(no trace holds the question)" : it.question),
    el("p", {}, "correct answer: ", el("b", {id: "answer"}, String(it.answer))),
    el("details", {}, el("summary", {}, "input columns"), inputs),
    el("div", {id: "chains"}, ...D.methods.filter((m) => rowOf(c, m)).map((m) => chainEl(c, m))),
    el("div", {id: "step"}));
  renderStep();
}

function chainEl(c, m) {
  const r = rowOf(c, m);
  const verdict = r.correct === null ? el("span", {}, "") :
    el("span", {class: r.correct ? "right" : "wrong"}, r.correct ? " ✓ right" : " ✗ wrong");
  const steps = r.steps.length ? r.steps.map((k, t) => {
    const s = D.steps[k];
    const mark = s.fallback ? " [fallback]" : s.revision && s.revision.taken ? " [revised]" : "";
    return el("li", {"data-step": t, onclick: () => { V.method = m; V.step = t; renderCase(); }},
              s.chosen, el("span", {class: "mark"}, mark));
  }) : r.chain.map((text) => el("li", {}, text));
  const box = el("div", {class: "chain", "data-method": m},
    el("h3", {onclick: () => { V.method = m; V.step = 0; renderCase(); }}, m),
    el("div", {style: "padding: 2px 8px"}, "answer: ",
       el("b", {class: "pred"}, r.pred === null ? "none" : String(r.pred)), verdict,
       ` (${r.stopped || "no trace"})`),
    r.gap ? el("p", {class: "gap"}, r.gap) : null,
    r.error ? el("p", {class: "gap"}, r.error) : null,
    el("ol", {}, ...steps),
    r.notes ? el("details", {}, el("summary", {}, "the mode's record"), el("pre", {}, r.notes))
            : null);
  box.classList.toggle("current", m === V.method);
  box.querySelectorAll("li").forEach((li) =>
    li.classList.toggle("current", m === V.method && Number(li.dataset.step) === V.step));
  return box;
}

function renderStep() {
  const r = V.kase ? rowOf(V.kase, V.method) : null;
  const box = $("step");
  writeHash();
  if (!r || !r.steps.length) {
    const said = !r ? `no ${V.method} row for this case` : r.gap || "no steps";
    box.replaceChildren(el("p", {class: "gap"}, said));
    return;
  }
  V.step = Math.max(0, Math.min(V.step, r.steps.length - 1));
  const s = D.steps[r.steps[V.step]];
  box.replaceChildren(
    el("h3", {id: "step-title", "data-method": V.method, "data-step": V.step + 1},
       `${V.method}: step ${V.step + 1} of ${r.steps.length}`),
    el("p", {id: "why"}, "why: " + s.why),
    el("div", {class: "steprow"}, stepTable(s, r), plane(s, r)));
}

function stepTable(s, r) {
  const J = r.judges, m = J.length;
  const t = el("table", {id: "candidates"}, el("tr", {}, el("th", {}, "#"),
    el("th", {}, "candidate"), ...J.map((j) => el("th", {}, "ŝ " + j)),
    ...J.map((j) => el("th", {}, "s* " + j)),
    el("th", {}, "s̄*"), el("th", {}, "Δ*"), el("th", {}, "passes"), el("th", {}, "")));
  s.candidates.forEach((text, i) => {
    const hat = s.s_hat[i] || [], star = s.s_star[i] || [];
    const chosen = i === s.index && !(s.revision && s.revision.taken);
    const tr = el("tr", {class: chosen ? "chosen" : "", "data-candidate": i},
      el("td", {}, String(i)), el("td", {class: "text"}, text),
      ...J.map((_, k) => num(k < hat.length ? hat[k] : null, "s_hat")),
      ...J.map((_, k) => num(k < star.length ? star[k] : null, "s_star")),
      num(s.s_bar_star[i], "s_bar_star"), num(s.delta_star[i], "delta_star"),
      el("td", {"data-field": "accepted"}, s.accepted[i] ? "yes" : "no"),
      el("td", {}, chosen ? "◀ chosen" + (s.fallback ? " (fallback)" : "") : ""));
    t.append(tr);
    if (s.reasons && s.reasons[i] && s.reasons[i].some((x) => x)) {
      t.append(el("tr", {class: "reasons"}, el("td", {}, ""), el("td", {colspan: 3 + 2 * m + 2},
        ...s.reasons[i].map((x, k) =>
          el("div", {}, `${J[k] || "judge"}: `, x === null ? "—" : x)))));
    }
  });
  if (s.revision) {
    const v = s.revision;
    t.append(el("tr", {class: v.taken ? "chosen" : "", "data-candidate": "revision"},
      el("td", {}, "rev"), el("td", {class: "text"}, v.candidate),
      ...J.map((_, k) => num(v.s_hat[k] === undefined ? null : v.s_hat[k], "s_hat")),
      ...J.map((_, k) => num(v.s_star[k] === undefined ? null : v.s_star[k], "s_star")),
      num(v.s_bar_star, "s_bar_star"), num(v.delta_star, "delta_star"),
      el("td", {}, v.taken ? "yes" : "no"), el("td", {}, v.taken ? "◀ chosen (revised)" : "")));
  }
  return t;
}

// The decision plane: each candidate at (Δ*, s̄*), the acceptance region Δ* < ε, s̄* > τ shaded.
function plane(s, r) {
  const W = 300, H = 240, tau = r.tau, eps = r.eps;
  const pts = s.candidates.map((_, i) => [s.delta_star[i], s.s_bar_star[i], i])
    .filter((p) => p[0] !== null && p[1] !== null);
  const xMax = Math.max(0.3, Math.min(2.5 * eps, 0.5), ...pts.map((p) => 1.1 * p[0]));
  const X = (x) => 40 + (x / xMax) * (W - 60), Y = (y) => H - 30 - y * (H - 45);
  const g = svg("svg", {id: "plane", width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  const e = Math.min(eps, xMax);
  g.append(svg("rect", {x: X(0), y: Y(1), width: X(e) - X(0), height: Y(tau) - Y(1),
                        fill: "#d6f0dc", "data-region": "accept"}));
  g.append(svg("rect", {x: X(0), y: Y(1), width: X(xMax) - X(0), height: Y(0) - Y(1),
                        fill: "none", stroke: "#444"}));
  g.append(svg("line", {x1: X(0), x2: X(xMax), y1: Y(tau), y2: Y(tau), stroke: "#1e8c3c"}));
  g.append(svg("line", {x1: X(e), x2: X(e), y1: Y(0), y2: Y(1), stroke: "#1e8c3c"}));
  g.append(svg("text", {x: X(xMax) - 2, y: Y(tau) - 3, "text-anchor": "end", "font-size": 11,
                        fill: "#1e8c3c"}, `τ = ${tau}`));
  g.append(svg("text", {x: X(e) + 3, y: Y(1) + 12, "font-size": 11, fill: "#1e8c3c"},
               `ε = ${eps}`));
  for (let i = 0; i <= 5; i++) {
    g.append(svg("text", {x: X(0) - 4, y: Y(i / 5) + 4, "text-anchor": "end", "font-size": 10},
                 (i / 5).toFixed(1)));
    g.append(svg("text", {x: X(xMax * i / 5), y: H - 16, "text-anchor": "middle", "font-size": 10},
                 (xMax * i / 5).toFixed(2)));
  }
  g.append(svg("text", {x: X(xMax / 2), y: H - 2, "text-anchor": "middle", "font-size": 11},
               "consensus dispersion Δ*"));
  g.append(svg("text", {x: 4, y: 10, "font-size": 11}, "s̄*"));
  // Candidates at the same point share one label ("#1,2"); the chosen one is drawn last, on top.
  const labels = {};
  for (const [x, y, i] of pts) (labels[`${x},${y}`] = labels[`${x},${y}`] || []).push(i);
  pts.sort((p, q) => (p[2] === s.index) - (q[2] === s.index));
  for (const [x, y, i] of pts) {
    const chosen = i === s.index && !(s.revision && s.revision.taken);
    const kind = chosen ? (s.fallback ? "fallback" : "accepted") : "other";
    const shape = kind === "fallback"
      ? svg("rect", {x: X(x) - 5, y: Y(y) - 5, width: 10, height: 10, fill: "#eb8214"})
      : svg("circle", {cx: X(x), cy: Y(y), r: 5, fill: kind === "accepted" ? "#1e8c3c" : "none",
                       stroke: kind === "accepted" ? "#222" : "#888", "stroke-width": 2});
    shape.setAttribute("data-point", i);
    const label = labels[`${x},${y}`];
    g.append(shape);
    if (label[0] === i) g.append(svg("text", {x: X(x) + 7, y: Y(y) + 4, "font-size": 11},
                                     "#" + label.join(",")));
  }
  return g;
}

function moveStep(d) {
  const r = V.kase ? rowOf(V.kase, V.method) : null;
  if (!r || !r.steps.length) return;
  V.step = Math.max(0, Math.min(r.steps.length - 1, V.step + d));
  renderCase();
}

document.addEventListener("keydown", (e) => {
  if (["SELECT", "INPUT", "TEXTAREA"].includes(e.target.tagName)) return;
  const moves = {ArrowRight: () => moveStep(1), ArrowLeft: () => moveStep(-1),
                 ArrowDown: () => go(V.pos + 1, 0), ArrowUp: () => go(V.pos - 1, 0)};
  if (!moves[e.key]) return;
  e.preventDefault();
  moves[e.key]();
});

// The fragment names the view: the case, the method, the step (from 1) and the filters.
function writeHash() {
  const p = new URLSearchParams();
  if (V.kase) {
    const it = D.items[V.kase.item];
    p.set("data", it.data); p.set("id", it.id); p.set("seed", V.kase.seed);
    p.set("method", V.method); p.set("step", V.step + 1);
  }
  for (const [k, v] of [["bench", S.bench], ["a", S.a], ["b", S.b], ["outcome", S.outcome],
                        ["fseed", S.seed]]) if (v) p.set(k, v);
  if (S.fallback) p.set("fallback", "1");
  const hash = "#" + p.toString();
  if (location.hash !== hash) history.replaceState(null, "", hash);
}
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const pick = (k, allowed, dflt) => (p.has(k) && allowed.includes(p.get(k)) ? p.get(k) : dflt);
  S.bench = pick("bench", D.files, "");
  S.a = pick("a", D.methods, S.a); S.b = pick("b", D.methods, S.b);
  S.outcome = pick("outcome", Object.keys(OUTCOMES), "");
  S.seed = pick("fseed", D.seeds.map(String), "");
  S.fallback = p.get("fallback") === "1";
  V.method = pick("method", D.methods, S.a);
  V.step = Math.max(0, (parseInt(p.get("step"), 10) || 1) - 1);
  V.kase = CASES.find((c) => D.items[c.item].data === p.get("data") &&
                             D.items[c.item].id === p.get("id") &&
                             String(c.seed) === p.get("seed")) || null;
}
window.addEventListener("hashchange", () => { readHash(); refilter(); });

readHash();
const wanted = {kase: V.kase, step: V.step};
refilter();
if (wanted.kase) { V.kase = wanted.kase; V.pos = V.list.indexOf(wanted.kase); V.step = wanted.step;
                   renderCase(); }
$("source").textContent = `${D.items.length} items, ${CASES.length} cases (item × seed), ` +
  `${D.rows.length} chains; images at most ${D.image_size} px` +
  (D.summary ? "" : "; no summary.json: counts not checked against it");
renderAccuracy();
document.body.dataset.ready = "1";
"""

PAGE = (
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>VERDICT cases: {{TITLE}}</title>
<style>"""
    + STYLE
    + """</style>
</head>
<body>
<header>
<h1>VERDICT cases: {{TITLE}}</h1>
<div id="source"></div>
<div id="filters"></div>
<div id="counts"></div>
<div id="accuracy"></div>
<div style="font-size: 12px; color: #666">keys: ← → steps, ↑ ↓ cases; the address names the view.
</div>
</header>
<main><div id="list"></div><div id="view"></div></main>
<script type="application/json" id="cases-data">{{DATA}}</script>
<script>"""
    + SCRIPT
    + """</script>
</body>
</html>
"""
)

"""The app's CSS and the small script in the page head (token inspector, sticky chat scroll).

Each provenance kind has a colour *and* a non-colour cue, in light and dark mode alike: accepted draft =
tinted background; target-corrected = wavy underline; bonus = dotted overline and underline; plain = no
tint (in the legend, a dashed frame). A draft token that prompt lookup proposed (rather than the draft model) has
a dashed underline too (``tdm-lookup``), and the inspector names its drafter. ``body.tdm-nocolour`` (the Chat's
"Colour tokens" switch) turns the colouring off: its rule is ``!important`` because Gradio also serves every rule
prefixed with its container's classes, which would outrank a plain ``body.…`` selector.
"""

TOKENS_CSS = """
.tdm-tok{border-radius:2px;padding:0;text-decoration-thickness:2px;text-underline-offset:3px;
  -webkit-box-decoration-break:clone;box-decoration-break:clone}
.tdm-accepted{background:rgba(34,197,94,.24)}
.tdm-corrected{background:rgba(239,68,68,.24);text-decoration:underline wavy #dc2626;cursor:pointer}
.tdm-bonus{background:rgba(59,130,246,.24);text-decoration:underline overline dotted #2563eb}
.tdm-plain{background:transparent}
.tdm-accepted.tdm-lookup{text-decoration:underline dashed #15803d}
.dark .tdm-accepted.tdm-lookup{text-decoration-color:#86efac}
.tdm-swatch.tdm-plain{outline:1px dashed rgba(100,116,139,.7);outline-offset:-1px}
.dark .tdm-accepted{background:rgba(74,222,128,.26)}
.dark .tdm-corrected{background:rgba(248,113,113,.34);text-decoration-color:#fca5a5}
.dark .tdm-bonus{background:rgba(129,140,248,.45);text-decoration-color:#c7d2fe}
.dark .tdm-swatch.tdm-plain{outline-color:rgba(203,213,225,.55)}
.tdm-conv .tdm-tok{border-radius:0}
body.tdm-nocolour .tdm-conv .tdm-tok{background:transparent!important;text-decoration:none!important;
  outline:none!important;cursor:auto!important}
.tdm-tok:focus-visible{outline:2px solid var(--color-accent)}
.tdm-cursor{animation:tdm-blink 1s steps(2) infinite;color:var(--body-text-color-subdued)}
@keyframes tdm-blink{50%{opacity:0}}
.tdm-legend{display:flex;flex-wrap:wrap;gap:6px 14px;font-size:12px;margin:4px 0}
.tdm-legend-item{display:inline-flex;align-items:center;gap:5px}
.tdm-swatch{display:inline-block;padding:0 4px;font-family:var(--font-mono)}
.tdm-inspector{position:fixed;z-index:1000;max-width:min(340px,92vw);padding:8px 10px;border-radius:8px;font-size:13px;
  background:var(--background-fill-primary);color:var(--body-text-color);border:1px solid var(--border-color-primary);
  box-shadow:0 6px 24px rgba(0,0,0,.25)}
.tdm-inspector b{font-weight:600}.tdm-inspector code{font-family:var(--font-mono);padding:0 3px;border-radius:3px;
  background:var(--background-fill-secondary)}
.tdm-inspector div+div{margin-top:3px}
"""

CHAT_CSS = """
#tdm-chatbot{max-height:62vh;min-height:260px;overflow-y:auto !important;overflow-x:hidden !important;
  border:1px solid var(--border-color-primary);border-radius:10px;padding:6px}
.tdm-conv{display:flex;flex-direction:column;gap:12px;padding:4px}
.tdm-msg{display:flex;flex-direction:column;max-width:100%}
.tdm-msg-user{align-items:flex-end}
.tdm-bubble{padding:8px 12px;border-radius:12px;max-width:92%;overflow-x:auto;line-height:1.55;font-size:15px}
.tdm-msg-user .tdm-bubble{background:var(--color-accent-soft);border:1px solid var(--border-color-accent-subdued)}
.tdm-msg-bot .tdm-bubble{background:var(--background-fill-secondary);border:1px solid var(--border-color-primary)}
.tdm-queued .tdm-bubble{opacity:.7;border-style:dashed}
.tdm-bubble p{margin:.2em 0 .6em}.tdm-bubble p:last-child{margin-bottom:0}
.tdm-bubble pre{padding:8px 10px;border-radius:8px;overflow-x:auto;background:var(--background-fill-primary);
  border:1px solid var(--border-color-primary);font-size:13px;line-height:1.5}
.tdm-bubble code{font-family:var(--font-mono);font-size:.92em}
.tdm-bubble ul,.tdm-bubble ol{margin:.2em 0 .6em 1.3em}
.tdm-bubble table{border-collapse:collapse;font-size:13px}.tdm-bubble td,.tdm-bubble th{padding:2px 8px;
  border:1px solid var(--border-color-primary)}
.tdm-plaintext{white-space:pre-wrap;word-break:break-word}
.tdm-replyline{font-size:12px;color:var(--body-text-color-subdued);margin:3px 6px 0;font-variant-numeric:tabular-nums}
.tdm-conv-empty{color:var(--body-text-color-subdued);font-size:14px;padding:24px 8px;text-align:center}
"""

PANEL_CSS = """
.tdm-tokens{white-space:pre-wrap;word-break:break-word;font-family:var(--font-mono);font-size:13px;line-height:1.7;
  min-height:120px;max-height:460px;overflow-y:auto;padding:10px;border:1px solid var(--border-color-primary);
  border-radius:8px;background:var(--background-fill-secondary)}
.tdm-empty,.tdm-muted{color:var(--body-text-color-subdued);font-size:12px}
.tdm-stats{display:flex;flex-wrap:wrap;gap:8px;margin:6px 0}
.tdm-stat{min-width:78px;padding:6px 10px;border-radius:8px;background:var(--background-fill-secondary);
  border:1px solid var(--border-color-primary)}
.tdm-stat-value{font-size:18px;font-weight:600;font-variant-numeric:tabular-nums}
.tdm-stat-label{font-size:11px;color:var(--body-text-color-subdued)}
.tdm-good .tdm-stat-value{color:#15803d}.tdm-bad .tdm-stat-value{color:#b91c1c}
.dark .tdm-good .tdm-stat-value{color:#4ade80}.dark .tdm-bad .tdm-stat-value{color:#f87171}
.tdm-note{font-size:12px;color:var(--body-text-color-subdued);margin:4px 0}
.tdm-warn{color:#b45309}.dark .tdm-warn{color:#fbbf24}
.tdm-chart{display:grid;grid-template-columns:auto 1fr;gap:0 4px;font-size:10px;color:var(--body-text-color-subdued);
  margin:6px 0}
.tdm-chart-title{grid-column:1/3;font-size:11px;margin-bottom:2px}
.tdm-yaxis{display:flex;flex-direction:column;justify-content:space-between;height:64px;text-align:right}
.tdm-bars{display:flex;align-items:flex-end;gap:4px;height:64px;border-left:1px solid var(--border-color-primary);
  border-bottom:1px solid var(--border-color-primary);padding:0 2px}
.tdm-bar{position:relative;flex:0 0 18px;height:100%}
.tdm-bar-fill{position:absolute;bottom:0;width:100%;background:#22c55e;border-radius:3px 3px 0 0;
  background-image:repeating-linear-gradient(45deg,rgba(255,255,255,.25) 0 3px,transparent 3px 6px)}
.tdm-xaxis{grid-column:2;display:flex;gap:4px;padding:0 2px}.tdm-xaxis span{flex:0 0 18px;text-align:center}
.tdm-xlabel{grid-column:2;text-align:center}
.tdm-status{padding:6px 10px;border-radius:6px;font-size:13px;margin:4px 0}
.tdm-status-info{background:rgba(59,130,246,.12)}.tdm-status-wait{background:rgba(234,179,8,.18)}
.tdm-status-error{background:rgba(239,68,68,.15);color:#b91c1c}.tdm-status-ok{background:rgba(34,197,94,.15)}
.dark .tdm-status-error{color:#fca5a5}
.tdm-side-head{display:flex;justify-content:space-between;align-items:baseline;margin-bottom:4px;gap:8px}
.tdm-timer{font-size:12px;font-variant-numeric:tabular-nums;color:var(--body-text-color-subdued)}
.tdm-row{display:flex;gap:12px;align-items:center;margin:4px 0;flex-wrap:wrap}
.tdm-badge{padding:3px 10px;border-radius:999px;font-size:12px;background:var(--background-fill-secondary)}
.tdm-badge-ok{background:rgba(34,197,94,.22);color:#15803d}.tdm-badge-diff{background:rgba(239,68,68,.18);color:#b91c1c}
.dark .tdm-badge-ok{color:#86efac}.dark .tdm-badge-diff{color:#fca5a5}
.tdm-badge-tie{background:rgba(234,179,8,.20);color:#854d0e}.dark .tdm-badge-tie{color:#fde68a}
.tdm-plot{width:100%;max-width:420px;height:auto}
.tdm-svg-good{fill:#22c55e}.tdm-svg-bad{fill:#ef4444}.tdm-svg-ref{stroke:#94a3b8;stroke-dasharray:3 3}
.tdm-svg-axis{stroke:#94a3b8}.tdm-svg-label{font-size:9px;fill:var(--body-text-color-subdued)}
.tdm-table{font-size:12px;border-collapse:collapse;margin-top:6px}
.tdm-table,.tdm-pairinfo{border:none!important;border-collapse:collapse}
.tdm-table td,.tdm-table th{padding:2px 8px;border:none!important;
  border-bottom:1px solid var(--border-color-primary)!important;text-align:left}
.tdm-pairinfo td,.tdm-pairinfo tr,.tdm-table tr{border:none!important;background:transparent!important}
.tdm-pairinfo td{padding:2px 10px 2px 0;font-size:13px}
.tdm-glossary dt{font-weight:600;margin-top:6px}.tdm-glossary dd{margin:0 0 0 2px;font-size:13px}
.tdm-tree{margin:8px 0;overflow-x:auto}
.tdm-tree-grid{display:grid;grid-auto-columns:max-content;gap:4px 6px;align-items:center;font-size:12px}
.tdm-tree-cell{padding:1px 6px;border-radius:6px;border:1px solid var(--border-color-primary);white-space:nowrap;
  color:var(--body-text-color)}
.tdm-tree-cell code{font-family:var(--font-mono)}
.tdm-tree-root{border-style:dashed;color:var(--body-text-color-subdued)}
.tdm-tree-kept{background:rgba(34,197,94,.24);border:2px solid #15803d;font-weight:600}
.tdm-tree-cut{border-style:dotted}
.tdm-tree-branch.tdm-tree-cut{background:var(--background-fill-secondary)}
.dark .tdm-tree-kept{background:rgba(74,222,128,.26);border-color:#4ade80}
"""

RACE_CSS = """
.tdm-race{display:grid;grid-template-columns:1fr 1fr;gap:12px}
@media (max-width:700px){.tdm-race{grid-template-columns:1fr}}
.tdm-lane{border:1px solid var(--border-color-primary);border-radius:8px;padding:8px;
  background:var(--background-fill-secondary)}
.tdm-lane-head{display:flex;justify-content:space-between;gap:8px;font-size:13px;margin-bottom:4px}
.tdm-track{height:6px;border-radius:3px;background:var(--border-color-primary);overflow:hidden;margin:4px 0 6px}
.tdm-track-fill{height:100%;width:0;background:var(--color-accent);animation:tdm-grow linear forwards}
.tdm-lane .tdm-tokens{min-height:80px;max-height:300px}
.tdm-tokens.tdm-md{white-space:normal;font-family:inherit;font-size:14px;line-height:1.55}
.tdm-md p{margin:.2em 0 .6em}.tdm-md p:last-child{margin-bottom:0}
.tdm-md pre{padding:8px 10px;border-radius:8px;overflow-x:auto;background:var(--background-fill-primary);
  border:1px solid var(--border-color-primary);font-size:13px;line-height:1.5;white-space:pre}
.tdm-md code{font-family:var(--font-mono);font-size:.92em}.tdm-md ul,.tdm-md ol{margin:.2em 0 .6em 1.3em}
.tdm-settings-line{margin:0;align-self:center}.tdm-section{margin:18px 0 2px;font-size:16px}
.tdm-race .tdm-tok,.tdm-finish{visibility:hidden;animation:tdm-show 0s linear forwards}
.tdm-finish{font-size:12px;font-weight:600}
@keyframes tdm-show{to{visibility:visible}}
@keyframes tdm-grow{to{width:100%}}
"""

LAB_CSS = """
.tdm-df th,.tdm-df th *,#tdm-cells th,#tdm-cells th *,#tdm-runs th,#tdm-runs th *{white-space:nowrap!important;
  word-break:keep-all!important;overflow-wrap:normal!important;hyphens:none}
#tdm-bench-status,#tdm-measure-note,#tdm-import-status{position:relative}
#tdm-bench-status:has(.wrap:not(.hide)),#tdm-measure-note:has(.wrap:not(.hide)){min-height:80px}
"""

# WCAG AA (4.5:1) where Gradio's own colours fall short: the selected tab is drawn in the accent (emerald 500,
# 2.5:1 on white), so light mode takes a darker shade of it; the tab bar wraps (``overflow_behavior="wrap"``)
# and its buttons narrow on a phone so all five tabs show on one or two lines instead of behind "⋯"; there the
# target and draft fields take a line each, so the model names are not cut.
A11Y_CSS = """
#tdm-tabs button[role=tab].selected{color:var(--primary-700)}
.dark #tdm-tabs button[role=tab].selected{color:var(--primary-400)}
@media (max-width:520px){#tdm-tabs button[role=tab]{padding:0 var(--size-2)}
  #tdm-target,#tdm-draft{min-width:100%!important}}
"""

CSS = TOKENS_CSS + CHAT_CSS + PANEL_CSS + RACE_CSS + LAB_CSS + A11Y_CSS

HEAD = """<script>
(() => {
  const KIND = {accepted: "accepted draft", corrected: "target-corrected", bonus: "bonus", plain: "plain"};
  const kindOf = (el) => Object.keys(KIND).find((k) => el.classList.contains("tdm-" + k)) || "";
  // reply.py's proposed_by: "draft" (older replies) is the draft model; otherwise the words the reply was drafted by
  const proposedBy = (w) => w === "lookup" ? "proposed by prompt lookup" :
    "proposed by the " + (w === "draft" ? "draft model" : w);
  function facts(el) {
    const d = el.dataset, out = [];
    if (d.s) out.push("target pass " + d.s);
    if (d.p) out.push("draft position " + d.p);
    if (d.w) out.push(proposedBy(d.w));
    if (d.q && kindOf(el) !== "corrected") out.push("draft p = " + d.q);
    return out;
  }
  function line(label, text) {
    const div = document.createElement("div");
    if (label) { const b = document.createElement("b"); b.textContent = label + " "; div.appendChild(b); }
    if (text !== undefined) { const c = document.createElement("code"); c.textContent = text; div.appendChild(c); }
    return div;
  }
  function popup() {
    let p = document.getElementById("tdm-inspector");
    if (!p) {
      p = document.createElement("div");
      p.id = "tdm-inspector"; p.className = "tdm-inspector"; p.setAttribute("role", "dialog"); p.hidden = true;
      document.body.appendChild(p);
    }
    return p;
  }
  function show(el) {
    const p = popup(), d = el.dataset, kind = kindOf(el);
    const head = document.createElement("div");
    head.textContent = [KIND[kind] || kind, ...facts(el)].join(" · ");
    p.replaceChildren(head);
    if (kind === "corrected" && d.d !== undefined) {
      const prob = d.q ? " (draft p = " + d.q + ")" : "";
      const a = line(d.w === "lookup" ? "prompt lookup proposed" : "draft proposed", d.d);
      a.appendChild(document.createTextNode(prob)); p.appendChild(a);
      p.appendChild(line("target chose", d.t));
    } else if (kind === "corrected") {
      p.appendChild(line("the target rejected the draft's token here and chose", el.textContent));
    }
    p.hidden = false;
    const r = el.getBoundingClientRect();
    const left = Math.max(8, Math.min(r.left, window.innerWidth - p.offsetWidth - 8));
    const below = r.bottom + 6 + p.offsetHeight <= window.innerHeight;
    p.style.left = left + "px";
    p.style.top = (below ? r.bottom + 6 : Math.max(8, r.top - p.offsetHeight - 6)) + "px";
  }
  document.addEventListener("click", (e) => {
    const el = e.target.closest && e.target.closest(".tdm-conv .tdm-tok, .tdm-tokens .tdm-tok");
    if (el && !document.body.classList.contains("tdm-nocolour")) { show(el); return; }
    if (!(e.target.closest && e.target.closest("#tdm-inspector"))) popup().hidden = true;
  });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") popup().hidden = true; });
  // A reply's tokens are one tab stop (reply.py's STOP): Left/Right/Home/End move it along the reply's tokens,
  // Enter or Space opens the inspector on the focused one.
  const said = (el) => (el.textContent.trim() || "whitespace") + ": " + (KIND[kindOf(el)] || kindOf(el)) +
    (el.dataset.w ? ", " + proposedBy(el.dataset.w) : "");
  const STEP = {ArrowRight: 1, ArrowLeft: -1, Home: -1e9, End: 1e9};
  document.addEventListener("keydown", (e) => {
    const el = e.target;
    if (!(el.matches && el.matches(".tdm-conv .tdm-tok, .tdm-tokens .tdm-tok"))) return;
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      if (!document.body.classList.contains("tdm-nocolour")) show(el);
      return;
    }
    if (!(e.key in STEP) || e.altKey || e.ctrlKey || e.metaKey) return;
    e.preventDefault();
    const all = Array.from(el.closest(".tdm-bubble, .tdm-tokens").querySelectorAll(".tdm-tok"));
    const to = all[Math.max(0, Math.min(all.length - 1, all.indexOf(el) + STEP[e.key]))];
    if (to === el) return;
    el.tabIndex = -1; el.removeAttribute("role"); el.removeAttribute("aria-label");
    to.tabIndex = 0; to.setAttribute("role", "button"); to.setAttribute("aria-label", said(to));
    to.focus();
  });
  document.addEventListener("mouseover", (e) => {
    const el = e.target.closest && e.target.closest(".tdm-tok");
    if (el && !el.title) el.title = [KIND[kindOf(el)] || "", ...facts(el)].join(" · ") + " (click for details)";
    const pick = e.target.closest && e.target.closest("#tdm-target input, #tdm-draft input");
    if (pick) pick.title = pick.value;  // the whole file name, where a narrow field cuts it
  });
  let atBottom = true;
  document.addEventListener("scroll", (e) => {
    const w = e.target;
    if (w && w.id === "tdm-chatbot") atBottom = w.scrollHeight - w.scrollTop - w.clientHeight < 48;
  }, true);
  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      const w = document.getElementById("tdm-chatbot");
      if (w && atBottom) w.scrollTop = w.scrollHeight;
    });
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
</script>"""

// The frame every page shares: small inline CSS (no fonts, scripts or CDNs), navigation, and the
// verdict legend that explains the colours.
import { FAIL_THRESHOLD, PASS_THRESHOLD } from '../domain/verdict.js';
import { html, SafeHtml } from './html.js';

const CSS = `
:root{--pass:#1a7f37;--pass-bg:#dafbe1;--unc:#9a6700;--unc-bg:#fff8c5;--fail:#cf222e;--fail-bg:#ffebe9;--unr:#57606a;--unr-bg:#eaeef2;--fg:#1f2328;--muted:#59636e;--line:#d0d7de;--bg:#fff;--card:#f6f8fa;--link:#0969da}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header.top{background:#24292f;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.4rem 1.2rem;align-items:baseline}
header.top a{color:#fff;text-decoration:none}header.top .brand{font-weight:700;margin-right:auto}header.top a.on{text-decoration:underline}
main{max-width:1100px;margin:0 auto;padding:1rem}h1{font-size:1.5rem;margin:.4rem 0 .8rem}h2{font-size:1.15rem;margin:1.6rem 0 .6rem}
a{color:var(--link)}.muted{color:var(--muted)}.small{font-size:.85rem}code,pre{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:var(--card);border:1px solid var(--line);padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:.6rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.6rem .8rem}.card .n{font-size:1.5rem;font-weight:700;overflow-wrap:anywhere}.card .l{color:var(--muted);font-size:.85rem}
.table-wrap{overflow-x:auto}table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:middle}
th{font-size:.8rem;text-transform:uppercase;letter-spacing:.03em;color:var(--muted)}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.v{display:inline-block;padding:.05rem .45rem;border-radius:999px;font-size:.78rem;font-weight:700;border:1px solid}
.v-PASS{color:var(--pass);background:var(--pass-bg);border-color:var(--pass)}.v-UNCERTAIN{color:var(--unc);background:var(--unc-bg);border-color:var(--unc)}
.v-FAIL{color:var(--fail);background:var(--fail-bg);border-color:var(--fail)}.v-UNRATED{color:var(--unr);background:var(--unr-bg);border-color:var(--unr)}
tr.r-PASS td:first-child{border-left:4px solid var(--pass)}tr.r-UNCERTAIN td:first-child{border-left:4px solid var(--unc)}tr.r-FAIL td:first-child{border-left:4px solid var(--fail)}tr.r-UNRATED td:first-child{border-left:4px solid var(--unr)}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1rem;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.5rem .8rem;font-size:.88rem}
.flag{display:inline-block;background:var(--fail-bg);color:var(--fail);border-radius:4px;padding:0 .35rem;margin:0 .2rem .1rem 0;font-size:.8rem}
.mix{display:flex;height:14px;border-radius:4px;overflow:hidden;border:1px solid var(--line);margin:.4rem 0}.mix span{display:block}
.mix .PASS{background:var(--pass)}.mix .UNCERTAIN{background:#d4a72c}.mix .FAIL{background:var(--fail)}.mix .UNRATED{background:#8c959f}
form.inline{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:.4rem 0}input[type=text],input[type=url],select{font:inherit;padding:.3rem .45rem;border:1px solid var(--line);border-radius:4px;min-width:0;max-width:100%}
input[type=url],input[type=text]{flex:1 1 280px}button{font:inherit;padding:.3rem .8rem;border:1px solid #1f883d;background:#1f883d;color:#fff;border-radius:4px;cursor:pointer}
.notice{border:1px solid var(--line);border-left:4px solid var(--unr);background:var(--card);padding:.6rem .8rem;border-radius:4px;margin:.6rem 0}.notice.err{border-left-color:var(--fail)}.notice.ok{border-left-color:var(--pass)}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:1rem}
figure.chart{margin:0;display:grid;grid-template-columns:4.8em minmax(0,1fr);grid-template-rows:auto 1.6em;column-gap:.35rem}
.chart-plot{position:relative;grid-column:2}.chart-y{position:relative;grid-column:1;grid-row:1}.chart-x{position:relative;grid-column:2;grid-row:2}
.chart-label{position:absolute;font-size:12px;line-height:1.2;white-space:nowrap;color:var(--muted)}
.chart-y .chart-label{right:0;transform:translateY(-50%)}.chart-x .chart-label{top:.25em}.chart-x .mid{transform:translateX(-50%)}.chart-x .end{transform:translateX(-100%)}
.chart-ref{right:.4em;transform:translateY(-110%);color:#8250df;background:rgba(255,255,255,.85);padding:0 .2em}
svg.chart{display:block;width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px}svg .grid{stroke:#eaeef2}
svg .line{fill:none;stroke:var(--link);stroke-width:2}svg .pt{fill:var(--link)}svg .ref{stroke:#8250df;stroke-dasharray:5 4}
svg.spark{vertical-align:middle}svg .spark-line{fill:none;stroke:#24292f;stroke-width:1.5}svg .spark-dot{fill:#24292f}svg .th-pass{stroke:var(--pass);stroke-opacity:.35;stroke-dasharray:2 2}svg .th-fail{stroke:var(--fail);stroke-opacity:.35;stroke-dasharray:2 2}
.diff del{background:var(--fail-bg);color:var(--fail);text-decoration:line-through}.diff ins{background:var(--pass-bg);color:var(--pass);text-decoration:none}
pre.textdiff{white-space:pre-wrap;word-break:break-word;padding:.4rem 0}pre.textdiff span{display:block;padding:0 .6rem}pre.textdiff del,pre.textdiff ins{display:block;padding:0 .6rem;text-decoration:none}pre.textdiff del{background:var(--fail-bg);color:var(--fail)}pre.textdiff ins{background:var(--pass-bg);color:var(--pass)}pre.textdiff .gap{color:var(--muted);font-style:italic}
.tooldiff h4{margin:.8rem 0 .2rem;font-size:.95rem}details{margin:.3rem 0}footer{max-width:1100px;margin:2rem auto 1rem;padding:0 1rem;color:var(--muted);font-size:.8rem}
@media (max-width:640px){main{padding:.6rem}.hide-sm{display:none}th,td{padding:.3rem .3rem}h1{font-size:1.25rem}}
`;

// The stylesheet is a constant of this module, not data: the one value passed through unescaped.
const STYLE = new SafeHtml(CSS);

export type Section = 'monitor' | 'drift' | 'atlas';

const iso = (t: Date | string) => (typeof t === 'string' ? t : t.toISOString());

/** A whole page; `generatedAt` is when this page was made (the service clock), shown in the footer. */
export function page(title: string, section: Section, body: SafeHtml, generatedAt?: Date | string): SafeHtml {
  const nav = (s: Section, href: string, label: string) => html`<a href="${href}" class="${s === section ? 'on' : ''}">${label}</a>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Trust Observatory</title><style>${STYLE}</style></head>
<body><header class="top"><a class="brand" href="/monitor">Trust Observatory</a>${nav('monitor', '/monitor', 'Monitor')}${nav('drift', '/drift', 'Drift')}${nav('atlas', '/atlas/report', 'Coverage report')}<a href="/openapi.json">API</a></header>
<main>${body}</main>
<footer>${generatedAt ? html`Generated <time datetime="${iso(generatedAt)}">${iso(generatedAt)}</time>. ` : ''}Every figure on this page comes from the same services as the JSON API.</footer>
</body></html>`;
}

export type VerdictName = 'PASS' | 'UNCERTAIN' | 'FAIL' | 'UNRATED';
const VERDICT_WORDS: Record<VerdictName, string> = { PASS: 'PASS', UNCERTAIN: 'UNCERTAIN', FAIL: 'FAIL', UNRATED: 'UNRATED' };

export function verdictPill(v: string): SafeHtml {
  const name = (v in VERDICT_WORDS ? v : 'UNRATED') as VerdictName;
  return html`<span class="v v-${name}">${VERDICT_WORDS[name]}</span>`;
}

/** What the colours mean, with the thresholds of the one verdict module. */
export function legend(): SafeHtml {
  return html`<div class="legend" role="note" aria-label="Verdict legend">
<span>${verdictPill('PASS')} score ≥ ${PASS_THRESHOLD}: safe to call</span>
<span>${verdictPill('UNCERTAIN')} ${FAIL_THRESHOLD}–${PASS_THRESHOLD - 1}.9: call with caution</span>
<span>${verdictPill('FAIL')} below ${FAIL_THRESHOLD}: block</span>
<span>${verdictPill('UNRATED')} no runtime evidence yet</span>
<span class="muted">Scores (0–100) come from observed success, latency against the category baseline and anomalies; small samples are pulled toward 50.</span>
</div>`;
}

// /atlas/report: what the index covers next to what agents ask about (coverage service).
import type { Services } from '../services/index.js';
import { fmtInt, fmtPct, fmtScore, fmtTime } from './format.js';
import { html, type SafeHtml } from './html.js';
import { page, verdictPill } from './layout.js';
import { listForm, listHref, PAGE_SIZE, serverHref, type ListQuery } from './monitor.js';

const COVERAGE_WORDS = { rated: 'rated', unrated: 'tracked, no evidence yet', untracked: 'not tracked' } as const;

export async function atlasReportPage(services: Services, q: ListQuery = {}): Promise<SafeHtml> {
  // The servers list: every tracked server (rated first, by score; then the unrated), searched
  // and filtered, one page at a time.
  const verdict = q.verdict?.trim() ? q.verdict : null;
  const [r, list] = await Promise.all([services.coverage.getCoverageReport(), services.trust.listServers({ category: q.category, q: q.q, verdict, cursor: q.cursor, limit: PAGE_SIZE, all: verdict === null })]);
  const listParams = { category: list.category ?? undefined, q: list.q ?? undefined, verdict: list.verdict ?? undefined };
  const t = r.totals;
  const maxServers = Math.max(1, ...r.categories.map((c) => c.servers));
  const maxChecks = Math.max(1, ...r.categories.map((c) => c.preflightChecks));
  const body = html`
<h1>Coverage report</h1>
<p class="muted">How much of what agents ask about the observatory can answer with runtime evidence.</p>
<div class="cards">
  <div class="card"><div class="n" data-total="servers">${fmtInt(t.servers)}</div><div class="l">servers tracked</div></div>
  <div class="card"><div class="n" data-total="rated">${fmtInt(t.rated)}</div><div class="l">rated (have evidence)</div></div>
  <div class="card"><div class="n" data-total="unrated">${fmtInt(t.unrated)}</div><div class="l">unrated</div></div>
  <div class="card"><div class="n" data-total="interactions">${fmtInt(t.interactions)}</div><div class="l">interactions (evidence)</div></div>
  <div class="card"><div class="n" data-total="preflights">${fmtInt(t.preflightChecks)}</div><div class="l">pre-flight checks (demand)</div></div>
  <div class="card"><div class="n" data-total="untracked_checks">${fmtInt(t.preflightChecksUntracked)}</div><div class="l">checks for servers not tracked</div></div>
</div>

<h2>Per category</h2>
<div class="table-wrap"><table class="categories">
<thead><tr><th>Category</th><th class="num">Servers</th><th class="num">Rated</th><th class="num">Unrated</th><th class="num">Interactions</th><th class="num">Pre-flights</th><th class="hide-sm">Servers vs demand</th></tr></thead>
<tbody>${r.categories.map(
    (c) => html`<tr data-category="${c.category}"><td><a href="/monitor?category=${encodeURIComponent(c.category)}">${c.category}</a></td>
<td class="num" data-col="servers">${fmtInt(c.servers)}</td><td class="num" data-col="rated">${fmtInt(c.rated)}</td><td class="num" data-col="unrated">${fmtInt(c.unrated)}</td>
<td class="num" data-col="interactions">${fmtInt(c.interactions)}</td><td class="num" data-col="preflights">${fmtInt(c.preflightChecks)}</td>
<td class="hide-sm">${bars(c.servers / maxServers, c.preflightChecks / maxChecks, `${c.category}: ${c.servers} servers, ${c.preflightChecks} pre-flight checks`)}</td></tr>`,
  )}</tbody></table></div>
<p class="small muted">Bars: <span style="color:#0969da">■</span> servers (relative to the largest category), <span style="color:#bf8700">■</span> pre-flight checks (relative to the most-checked category). A long demand bar over a short server bar is a gap in coverage.</p>

<h2>Most-checked targets</h2>
${
  r.targets.length === 0
    ? html`<p class="muted">No pre-flight checks yet.</p>`
    : html`<div class="table-wrap"><table class="targets"><thead><tr><th>Target</th><th class="num">Checks</th><th>Coverage</th><th>Verdict now</th><th class="num">Score</th><th class="hide-sm">Last checked</th></tr></thead><tbody>${r.targets.map(
        (x) => html`<tr class="r-${x.verdict}"><td>${x.slug ? html`<a href="${serverHref(x.slug)}">${x.name}</a>` : x.name}${x.category ? html`<br><span class="small muted">${x.category}</span>` : ''}</td>
<td class="num">${fmtInt(x.checks)}</td><td>${COVERAGE_WORDS[x.coverage]}</td><td>${verdictPill(x.verdict)}</td><td class="num">${fmtScore(x.trustScore)}</td><td class="hide-sm">${fmtTime(x.lastCheckedAt)}</td></tr>`,
      )}</tbody></table></div>`
}
<h2 id="servers">Servers</h2>
${listForm('/atlas/report', q, r.categories.map((c) => ({ name: c.category, servers: c.servers })), { verdictAll: 'all (rated first)' })}
<p class="small muted"><span data-list-total="${list.total}${list.totalCapped ? '+' : ''}">${fmtInt(list.total)}${list.totalCapped ? '+' : ''}</span> tracked server(s)${list.category ? html` in ${list.category}` : ''}${list.verdict ? html` with verdict ${list.verdict}` : ''}${list.q ? html` matching “${list.q}”` : ''}.</p>
<div class="table-wrap"><table class="servers"><thead><tr><th class="num">Rank</th><th>Server</th><th>Category</th><th>Coverage</th><th>Verdict</th><th class="num">Score</th><th class="num hide-sm">Interactions</th></tr></thead><tbody>${list.rows.map(({ row: s, rank }) => {
    const v = rank !== null ? s.verdict! : 'UNRATED';
    return html`<tr class="r-${v}" data-url="${s.url}"><td class="num">${rank ?? '–'}</td><td><a href="${serverHref(s.slug)}">${s.name}</a><br><span class="small muted">${s.url}</span></td><td>${s.category}</td><td>${COVERAGE_WORDS[rank !== null ? 'rated' : 'unrated']}</td><td>${verdictPill(v)}</td><td class="num">${rank !== null ? fmtScore(s.trust_score) : '–'}</td><td class="num hide-sm">${fmtInt(Number(s.n))}</td></tr>`;
  })}</tbody></table></div>
${list.rows.length === 0 ? html`<p class="muted">No tracked server matches.</p>` : ''}
<p class="pager">${q.cursor ? html`<a href="${listHref('/atlas/report', listParams)}#servers" rel="first">First page</a> ` : ''}${list.nextCursor ? html`<a href="${listHref('/atlas/report', { ...listParams, cursor: list.nextCursor })}#servers" rel="next">Next ${PAGE_SIZE} →</a>` : ''}</p>

<p class="small muted">Share of tracked servers that are rated: ${fmtPct(t.servers > 0 ? t.rated / t.servers : null)}. Pre-flight checks are demand signals only; they never change a score. JSON: <a href="/api/stats">/api/stats</a>, <a href="/api/demand">/api/demand</a>.</p>
`;
  return page('Coverage report', 'atlas', body, r.generatedAt);
}

function bars(servers: number, demand: number, label: string): SafeHtml {
  const w = 160;
  return html`<svg viewBox="0 0 ${w} 18" width="${w}" height="18" role="img" aria-label="${label}"><title>${label}</title>
<rect x="0" y="1" width="${Math.max(1, servers * w).toFixed(1)}" height="7" fill="#0969da"/><rect x="0" y="10" width="${Math.max(demand > 0 ? 1 : 0, demand * w).toFixed(1)}" height="7" fill="#bf8700"/></svg>`;
}

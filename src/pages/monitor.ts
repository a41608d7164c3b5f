// /monitor and /monitor/server/{slug}: the live picture, every figure from the trust, receipt
// and pre-flight services (the same calls the JSON API makes).
import type { Config } from '../config.js';
import { gradeFor } from '../domain/verdict.js';
import type { Services } from '../services/index.js';
import type { ServerCardCheck } from '../services/mcp-probe.js';
import { lineChart, sparkline } from './charts.js';
import { fmtDelta, fmtInt, fmtMs, fmtPct, fmtScore, fmtTime } from './format.js';
import { html, type SafeHtml } from './html.js';
import { legend, page, verdictPill } from './layout.js';

export const MONITOR_DAYS = 30;
const DELTA_WINDOWS = ['24h', '48h', '7d'] as const;

export const serverHref = (slug: string) => `/monitor/server/${encodeURIComponent(slug)}`;

function mixBar(mix: { pass?: number; uncertain?: number; fail?: number; unrated?: number } | undefined): SafeHtml {
  const m = { PASS: mix?.pass ?? 0, UNCERTAIN: mix?.uncertain ?? 0, FAIL: mix?.fail ?? 0, UNRATED: mix?.unrated ?? 0 };
  const total = Object.values(m).reduce((a, b) => a + b, 0);
  if (total === 0) return html`<p class="muted">No servers yet.</p>`;
  return html`<div class="mix" role="img" aria-label="${Object.entries(m).map(([k, v]) => `${k} ${v}`).join(', ')}">${Object.entries(m).map(([k, v]) =>
    v > 0 ? html`<span class="${k}" style="width:${((v / total) * 100).toFixed(2)}%" title="${k}: ${v}"></span>` : '',
  )}</div>
<p class="small">${Object.entries(m).map(([k, v]) => html`${verdictPill(k)} <b data-mix="${k}">${v}</b> &nbsp; `)}</p>`;
}

/** Servers per page of /monitor and /atlas/report; anomalies and deltas listed at most. */
export const PAGE_SIZE = 50;
export const LIST_CAP = 20;

export interface ListQuery {
  category?: string;
  q?: string;
  verdict?: string;
  cursor?: string;
}

/** The filter form of a server list (search text, category, verdict), a plain GET form. */
export function listForm(action: string, q: ListQuery, categories: { name?: string; servers?: number }[], opts: { verdictAll: string; hidden?: Record<string, string> }): SafeHtml {
  const category = q.category?.trim().toLowerCase() ?? '';
  const verdict = q.verdict?.trim().toUpperCase() ?? '';
  return html`<form class="inline" method="get" action="${action}">${Object.entries(opts.hidden ?? {}).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
  <label for="q">Search</label><input type="text" id="q" name="q" maxlength="200" placeholder="name, slug or URL" value="${q.q ?? ''}">
  <label for="category">Category</label>
  <select id="category" name="category"><option value="">all categories</option>${categories.map(
    (c) => html`<option value="${c.name}" ${c.name === category ? html`selected` : ''}>${c.name} (${fmtInt(c.servers)})</option>`,
  )}</select>
  <label for="verdict">Verdict</label>
  <select id="verdict" name="verdict"><option value="">${opts.verdictAll}</option>${['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'].map((v) => html`<option ${v === verdict ? html`selected` : ''}>${v}</option>`)}</select>
  <button type="submit">Filter</button>${q.category || q.q || q.verdict ? html` <a href="${action}">clear</a>` : ''}
</form>`;
}

/** A link to the same list with other parameters (empty ones left out). */
export function listHref(path: string, params: Record<string, string | null | undefined>): string {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) u.set(k, v);
  const qs = u.toString();
  return qs ? `${path}?${qs}` : path;
}

export async function monitorPage(services: Services, q: ListQuery & { window?: string }): Promise<SafeHtml> {
  const trust = services.trust;
  const window = DELTA_WINDOWS.includes(q.window as (typeof DELTA_WINDOWS)[number]) ? q.window! : '24h';
  // One page of the ranked list (the leaderboard, or the servers of one verdict, UNRATED
  // included), searched and filtered; the figures beside it cover the whole index.
  const list = await trust.listServers({ category: q.category, q: q.q, verdict: q.verdict, cursor: q.cursor, limit: PAGE_SIZE });
  const category = list.category;
  const rows = list.rows.map((r) => r.row);
  const [stats, tiers, history, anomalies, delta] = await Promise.all([
    trust.getStats({}),
    trust.getSlaTiersOf(rows),
    trust.getTrustHistoryOf(rows, MONITOR_DAYS),
    trust.getAnomalies(category),
    trust.getTrustDelta({ window, newLimit: LIST_CAP }),
  ]);
  const nameLink = (url: string | undefined, name: string | undefined, slug?: string) => (slug ? html`<a href="${serverHref(slug)}">${name}</a>` : html`${name}`);
  const bySlug = new Map(rows.map((r) => [r.url, r.slug]));
  const link = (url: string | undefined, name: string | undefined) => nameLink(url, name, url ? bySlug.get(url) : undefined);
  const d = delta.summary;
  const filtered = list.q !== null || list.verdict !== null;
  const listParams = { category: category ?? undefined, q: list.q ?? undefined, verdict: list.verdict ?? undefined, window: window === '24h' ? undefined : window };
  const body = html`
<h1>Monitor</h1>
${legend()}
<h2>The index</h2>
<div class="cards">
  <div class="card"><div class="n" data-stat="servers">${fmtInt(stats.totalServersTracked)}</div><div class="l">servers tracked</div></div>
  <div class="card"><div class="n" data-stat="interactions">${fmtInt(stats.totalInteractionsRecorded)}</div><div class="l">interactions recorded</div></div>
  <div class="card"><div class="n" data-stat="last24h">${fmtInt(stats.interactionsLast24h)}</div><div class="l">interactions, last 24 h</div></div>
  <div class="card"><div class="n" data-stat="average">${fmtScore(stats.averageTrustScore)}</div><div class="l">average trust score</div></div>
</div>
<h2>Verdict mix</h2>
${mixBar(stats.verdictMix)}

<h2 id="leaderboard">${list.verdict === 'UNRATED' ? 'Servers without runtime evidence' : 'Leaderboard'}${category ? html` · ${category}` : ''}${list.verdict && list.verdict !== 'UNRATED' ? html` · ${list.verdict}` : ''}${list.q ? html` · “${list.q}”` : ''}</h2>
${listForm('/monitor', q, stats.categories ?? [], { verdictAll: 'ranked (rated)', hidden: window === '24h' ? {} : { window } })}
<p class="small muted"><span data-list-total="${list.total}${list.totalCapped ? '+' : ''}">${fmtInt(list.total)}${list.totalCapped ? '+' : ''}</span> ${list.verdict === 'UNRATED' ? 'unrated' : 'rated'} server(s)${category ? html` in ${category}` : ''}${filtered ? ' match' : ''}${list.rows.length > 0 ? html`, showing ${fmtInt(list.rows.length)} from <b data-first-rank>${list.rows[0]!.rank ?? '–'}</b>` : ''}. Sparklines: trust score over the last ${MONITOR_DAYS} days (dotted lines at 60 and 40). <span data-unrated="${list.unratedCount}">${fmtInt(list.unratedCount)} tracked server(s) without runtime evidence (UNRATED) are not ranked</span>; <a href="${listHref('/monitor', { ...listParams, verdict: 'UNRATED', cursor: undefined })}">list them</a> or see <a href="/atlas/report">coverage</a>.</p>
<div class="table-wrap"><table class="leaderboard">
<thead><tr><th class="num">#</th><th>Server</th><th class="num">Score</th><th>Verdict</th><th>Grade</th><th>Tier</th><th class="hide-sm">Trust, ${MONITOR_DAYS} d</th><th class="num hide-sm">Success</th><th class="num hide-sm">Avg latency</th><th class="num hide-sm">Calls</th></tr></thead>
<tbody>${list.rows.map(({ row: s, rank }) => {
    const rated = rank !== null;
    const v = rated ? s.verdict! : 'UNRATED';
    const n = Number(s.n);
    return html`<tr class="r-${v}" data-url="${s.url}">
<td class="num">${rank ?? '–'}</td>
<td><a href="${serverHref(s.slug)}">${s.name}</a><br><span class="small muted">${s.category}</span></td>
<td class="num" data-score>${rated ? fmtScore(s.trust_score) : '–'}</td><td>${verdictPill(v)}</td><td>${rated ? gradeFor(s.trust_score!) : '–'}</td><td>${tiers.get(s.url) ?? 'Unrated'}</td>
<td class="hide-sm">${rated ? sparkline((history.get(s.url) ?? []).map((p) => ({ t: p.at, v: p.trustScore })), `Trust score of ${s.name} over ${MONITOR_DAYS} days`) : ''}</td>
<td class="num hide-sm">${fmtPct(n > 0 ? Number(s.successes) / n : null)}</td><td class="num hide-sm">${fmtMs(n > 0 ? Number(s.latency_sum) / n : null)}</td><td class="num hide-sm">${fmtInt(n)}</td></tr>`;
  })}</tbody></table></div>
${list.rows.length === 0 ? html`<p class="muted">No ${list.verdict === 'UNRATED' ? 'unrated' : 'rated'} servers${category ? ' in this category' : ''}${filtered ? ' match' : ' yet'}.</p>` : ''}
<p class="pager">${q.cursor ? html`<a href="${listHref('/monitor', listParams)}#leaderboard" rel="first">First page</a> ` : ''}${list.nextCursor ? html`<a href="${listHref('/monitor', { ...listParams, cursor: list.nextCursor })}#leaderboard" rel="next">Next ${PAGE_SIZE} →</a>` : ''}</p>

<h2 id="anomalies">Active anomalies</h2>
${
  anomalies.length === 0
    ? html`<p class="muted">No server shows an active anomaly.</p>`
    : html`<div class="table-wrap"><table class="anomalies"><thead><tr><th>Server</th><th class="num">Score</th><th>Verdict</th><th>Flags</th></tr></thead><tbody>${anomalies.slice(0, PAGE_SIZE).map(
        (a) => html`<tr class="r-${a.verdict}"><td><a href="${serverHref(a.slug)}">${a.name}</a></td><td class="num">${fmtScore(a.trustScore)}</td><td>${verdictPill(a.verdict)}</td><td>${a.flags.map((f) => html`<span class="flag">${f}</span>`)}</td></tr>`,
      )}</tbody></table></div>${anomalies.length > PAGE_SIZE ? html`<p class="small muted" data-more="anomalies">The ${PAGE_SIZE} lowest scores of ${fmtInt(anomalies.length)} servers with an active anomaly${category ? html` in ${category}` : ''}.</p>` : ''}`
}
<p class="small muted">Flags: latency_spike (recent latency far above the server's own history), error_rate_spike (failures well above its usual rate), burst_5xx (a burst of 5xx answers), volume_drop (traffic fell sharply): each costs points. tool_manifest_drift: the server's tool descriptions or schemas changed in the last 7 days (<a href="/drift">see what changed</a>).</p>

<h2 id="deltas">Latest trust deltas</h2>
<form class="inline" method="get" action="/monitor">${Object.entries({ category: category ?? '', q: list.q ?? '', verdict: list.verdict ?? '' }).map(([k, v]) => (v ? html`<input type="hidden" name="${k}" value="${v}">` : ''))}
  <label for="window">Window</label><select id="window" name="window">${DELTA_WINDOWS.map((w) => html`<option ${w === window ? html`selected` : ''}>${w}</option>`)}</select><button type="submit">Show</button>
</form>
<div class="cards">
  <div class="card"><div class="n" data-delta="new">${fmtInt(d?.newServers)}</div><div class="l">new</div></div>
  <div class="card"><div class="n" data-delta="improved">${fmtInt(d?.serversImproved)}</div><div class="l">improved (&gt; +5)</div></div>
  <div class="card"><div class="n" data-delta="degraded">${fmtInt(d?.serversDegraded)}</div><div class="l">degraded (&lt; −5)</div></div>
  <div class="card"><div class="n" data-delta="at_risk">${fmtInt(d?.serversAtRisk)}</div><div class="l">at risk (&lt; 40)</div></div>
</div>
<div class="grid2">
<div><h3>Improved</h3>${deltaList(delta.serversImproved ?? [], link)}</div>
<div><h3>Degraded</h3>${deltaList(delta.serversDegraded ?? [], link)}</div>
</div>
${(delta.serversNew ?? []).length > 0 ? html`<h3>New</h3><ul>${delta.serversNew!.slice(0, LIST_CAP).map((s) => html`<li>${link(s.url, s.name)} <span class="muted small">${s.category}, first seen ${fmtTime(s.registeredAt)}</span></li>`)}</ul>${more(delta.serversNew!.length)}` : ''}
${(delta.serversAtRisk ?? []).length > 0 ? html`<h3>At risk</h3><ul>${delta.serversAtRisk!.slice(0, LIST_CAP).map((s) => html`<li>${link(s.url, s.name)} ${verdictPill('FAIL')} ${fmtScore(s.trustScore)}</li>`)}</ul>${more(delta.serversAtRisk!.length)}` : ''}
`;
  return page('Monitor', 'monitor', body, stats.generatedAt);
}

/** "and N more" under a list cut at LIST_CAP (the JSON API has them all: /api/trust-delta). */
function more(total: number): SafeHtml | '' {
  return total > LIST_CAP ? html`<p class="small muted">and ${fmtInt(total - LIST_CAP)} more (<a href="/api/trust-delta">/api/trust-delta</a>).</p>` : '';
}

function deltaList(
  rows: { url?: string; name?: string; trustScore?: number; prevScore?: number; delta?: number }[],
  nameLink: (url: string | undefined, name: string | undefined) => SafeHtml,
): SafeHtml {
  if (rows.length === 0) return html`<p class="muted small">None in this window.</p>`;
  return html`<ul>${rows.slice(0, LIST_CAP).map((r) => html`<li>${nameLink(r.url, r.name)}: ${fmtScore(r.prevScore)} → ${fmtScore(r.trustScore)} (<b>${fmtDelta(r.delta ?? 0)}</b>)</li>`)}</ul>${more(rows.length)}`;
}

/** What the server's Server Card claims against what it said at the latest probe (a claim: no score effect). */
export function serverCardSection(c: ServerCardCheck | undefined): SafeHtml | '' {
  if (!c) return '';
  const diffs = c.differences ?? [];
  return html`<section class="notice ${c.matches ? 'ok' : 'err'}" id="server-card"><b>Server Card</b> (<a href="${c.cardUrl}">${c.cardUrl}</a>, checked ${fmtTime(c.checkedAt)}): ${
    c.matches
      ? 'what it claims matches what the server said.'
      : html`it contradicts the server (<span class="flag">server_card_mismatch</span>; a card is a claim and changes no score):<ul class="card-diff">${diffs.map((d) => html`<li data-field="${d.field}">${d.detail}</li>`)}</ul>`
  }</section>`;
}

export async function serverPage(services: Services, config: Config, slug: string): Promise<SafeHtml> {
  const trust = services.trust;
  const bench = await trust.getBenchmark({ serverSlug: slug });
  const url = bench.serverUrl!;
  const [rec, tier, series, receipts] = await Promise.all([
    trust.getTrust({ url }),
    trust.getSlaTier({ server: url }),
    trust.getServerSeries(url, MONITOR_DAYS),
    services.receipt.recentReceipts(url, 10),
  ]);
  const base = rec.categoryBaseline!;
  const verdict = bench.verdict ?? 'UNRATED';
  const flags = rec.anomaly?.anomalyFlags ?? [];
  const pageUrl = `${config.publicBaseUrl}${serverHref(bench.serverSlug!)}`;
  const badgeUrl = tier.badgeUrl!;
  const markdown = `[![MCP trust](${badgeUrl})](${pageUrl})`;
  const htmlSnippet = `<a href="${pageUrl}"><img src="${badgeUrl}" alt="MCP trust"></a>`;
  const why =
    verdict === 'UNRATED'
      ? 'No runtime evidence yet.'
      : `Score ${fmtScore(bench.trustScore)}: success ${fmtPct(rec.metrics?.successRate)} against a category average of ${fmtPct(base.avgSuccessRate)}, average latency ${fmtMs(rec.metrics?.avgLatencyMs)} against ${fmtMs(base.avgLatencyMs)}${flags.length ? `, active anomalies: ${flags.join(', ')}` : ', no active anomaly'}.`;
  const body = html`
<p class="small"><a href="/monitor">← Monitor</a></p>
<h1>${bench.name} ${verdictPill(verdict)}</h1>
<p class="muted small">${bench.serverUrl} · category <a href="/monitor?category=${encodeURIComponent(bench.category ?? '')}">${bench.category}</a> · tracked since ${fmtTime(rec.server?.registeredAt)} · MCP protocol <span data-field="protocol_version">${rec.server?.protocolVersion ?? 'not probed yet'}</span> · last report ${
    bench.lastUpdated ? html`<time data-field="last_report" datetime="${bench.lastUpdated}">${fmtTime(bench.lastUpdated)}</time>` : 'none yet'
  }</p>
<div class="notice ${verdict === 'PASS' ? 'ok' : verdict === 'FAIL' ? 'err' : ''}"><b>Why:</b> ${why}</div>
<div class="cards">
  <div class="card"><div class="n" data-field="trust_score">${fmtScore(bench.trustScore)}</div><div class="l">trust score</div></div>
  <div class="card"><div class="n" data-field="grade">${bench.trustGrade}</div><div class="l">grade</div></div>
  <div class="card"><div class="n" data-field="tier">${tier.tier}</div><div class="l">SLA tier</div></div>
  <div class="card"><div class="n" data-field="interactions">${fmtInt(rec.metrics?.totalInteractions)}</div><div class="l">interactions</div></div>
  <div class="card"><div class="n" data-field="success_rate">${fmtPct(rec.metrics?.successRate)}</div><div class="l">success rate (all time)</div></div>
  <div class="card"><div class="n" data-field="avg_latency">${fmtMs(rec.metrics?.avgLatencyMs)}</div><div class="l">average latency</div></div>
  <div class="card"><div class="n">${fmtMs(bench.latency?.p95Ms)}</div><div class="l">p95 latency</div></div>
  <div class="card"><div class="n">${(bench.reliability?.trend ?? '–').replace(/_/g, ' ')}</div><div class="l">7-day trend</div></div>
</div>
${flags.length ? html`<p>Active anomalies: ${flags.map((f) => html`<span class="flag">${f}</span>`)}</p>` : ''}
${serverCardSection(rec.serverCard)}
${legend()}
<div class="grid2">
<section><h2>Latency per day</h2>${lineChart(
    series.daily.map((p) => ({ t: p.day, v: p.avgLatencyMs })),
    { title: `Average latency per day of ${bench.name}`, format: (v) => `${Math.round(v)} ms`, refs: [{ v: base.avgLatencyMs ?? 0, label: `category avg ${Math.round(base.avgLatencyMs ?? 0)} ms` }] },
  )}</section>
<section><h2>Success rate per day</h2>${lineChart(
    series.daily.map((p) => ({ t: p.day, v: p.successRate })),
    { title: `Success rate per day of ${bench.name}`, format: (v) => `${Math.round(v * 100)}%`, yMin: 0, yMax: 1, refs: [{ v: base.avgSuccessRate ?? 0, label: `category avg ${fmtPct(base.avgSuccessRate)}` }] },
  )}</section>
<section><h2>Trust score</h2>${lineChart(
    series.trustHistory.map((p) => ({ t: p.at, v: p.trustScore })),
    { title: `Trust score of ${bench.name}`, format: (v) => v.toFixed(0), yMin: 0, yMax: 100, refs: [{ v: 60, label: 'PASS 60' }, { v: 40, label: 'FAIL below 40' }] },
  )}</section>
<section><h2>Category baseline: ${base.category}</h2>
<table><tbody>
<tr><th>Servers in category</th><td class="num" data-field="baseline_servers">${fmtInt(base.serverCount)}</td></tr>
<tr><th>Average latency</th><td class="num">${fmtMs(base.avgLatencyMs)}</td></tr>
<tr><th>p95 latency</th><td class="num">${fmtMs(base.p95LatencyMs)}</td></tr>
<tr><th>Average success rate</th><td class="num">${fmtPct(base.avgSuccessRate)}</td></tr>
</tbody></table>
<p class="small muted">Reliability: 7 d ${fmtPct(bench.reliability?.successRate7d)}, 30 d ${fmtPct(bench.reliability?.successRate30d)}; ${fmtInt(bench.volume?.calls7d)} calls in 7 days over ${fmtInt(bench.volume?.daysObserved)} observed days.</p>
</section>
</div>

<h2>Recent receipts</h2>
${
  receipts.length === 0
    ? html`<p class="muted">No signed receipts about this server yet (pre-flight checks, gateway decisions and attestations issue them).</p>`
    : html`<div class="table-wrap"><table class="receipts"><thead><tr><th>Receipt</th><th>Kind</th><th>Verdict</th><th>Issued</th></tr></thead><tbody>${receipts.map(
        (r) => html`<tr><td><a href="/v1/receipt/${r.receiptId}"><code>${r.receiptId}</code></a></td><td>${r.kind}</td><td>${typeof r.claim.verdict === 'string' ? verdictPill(r.claim.verdict) : html`<span class="muted">–</span>`}</td><td>${fmtTime(r.issuedAt)}</td></tr>`,
      )}</tbody></table></div>`
}

<h2>Badge for your README</h2>
<p><img src="/api/badge?url=${encodeURIComponent(url)}" alt="MCP trust badge of ${bench.name}"></p>
<p class="small">Markdown</p><pre class="badge-md">${markdown}</pre>
<p class="small">HTML</p><pre class="badge-html">${htmlSnippet}</pre>
<p class="small muted">JSON: <a href="/api/trust?url=${encodeURIComponent(url)}">/api/trust</a> · <a href="/benchmark/${encodeURIComponent(bench.serverSlug!)}">/benchmark</a> · <a href="/api/sla-tier?server=${encodeURIComponent(url)}">/api/sla-tier</a></p>
`;
  // Generated: when this page was made (the time the series were read), not the last report.
  return page(bench.name ?? slug, 'monitor', body, series.to);
}

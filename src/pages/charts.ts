// Inline SVG charts computed from real series (no script, no external library): they scale with
// the page through viewBox and carry a text alternative for screen readers.
import { html, type SafeHtml } from './html.js';

export interface Point {
  t: Date;
  v: number;
}

const r1 = (n: number) => Math.round(n * 10) / 10;

/** A small trust-score line (0-100) with the PASS and FAIL thresholds drawn faintly. */
export function sparkline(points: readonly Point[], label: string, opts: { width?: number; height?: number } = {}): SafeHtml {
  const w = opts.width ?? 120;
  const h = opts.height ?? 28;
  if (points.length === 0) return html`<span class="muted small">no history</span>`;
  const t0 = points[0]!.t.getTime();
  const span = Math.max(1, points[points.length - 1]!.t.getTime() - t0);
  const x = (p: Point) => r1(points.length === 1 ? w / 2 : ((p.t.getTime() - t0) / span) * (w - 4) + 2);
  const y = (v: number) => r1(h - 2 - (Math.min(100, Math.max(0, v)) / 100) * (h - 4));
  const d = points.map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p)},${y(p.v)}`).join(' ');
  const last = points[points.length - 1]!;
  return html`<svg class="spark" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img" aria-label="${label}">
<title>${label}</title>
<line x1="0" x2="${w}" y1="${y(60)}" y2="${y(60)}" class="th-pass"/><line x1="0" x2="${w}" y1="${y(40)}" y2="${y(40)}" class="th-fail"/>
<path d="${d}" class="spark-line"/><circle cx="${x(last)}" cy="${y(last.v)}" r="2" class="spark-dot"/></svg>`;
}

export interface LineChartOptions {
  title: string;
  /** Formats a value for the axis and the point tooltips. */
  format: (v: number) => string;
  yMin?: number;
  yMax?: number;
  /** Horizontal reference lines, e.g. the category baseline. */
  refs?: { v: number; label: string; cls?: string }[];
  cls?: string;
}

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/**
 * A line chart over time with grid lines, reference lines and a tooltip per point. The SVG draws
 * only geometry and scales with its column; every label is HTML text placed over it by
 * percentage, so labels keep the page's font size (12 px) at any width instead of shrinking
 * with the drawing (11 SVG units in a 640-unit viewBox rendered about 6 px in a third of a
 * 1280 px page). Labels repeat what the SVG's aria-label already says, so they are aria-hidden.
 */
export function lineChart(points: readonly Point[], o: LineChartOptions): SafeHtml {
  // Plot coordinates (viewBox units); a small inset keeps edge points and lines inside the frame.
  const W = 480;
  const H = 240;
  const PAD = 8;
  if (points.length === 0) return html`<p class="muted">No reports in this period.</p>`;
  const values = [...points.map((p) => p.v), ...(o.refs ?? []).map((r) => r.v)];
  const yMin = o.yMin ?? 0;
  const yMax = o.yMax ?? niceMax(Math.max(...values) * 1.1);
  const t0 = points[0]!.t.getTime();
  const t1 = points[points.length - 1]!.t.getTime();
  const span = Math.max(1, t1 - t0);
  const x = (t: number) => r1(points.length === 1 ? W / 2 : PAD + ((t - t0) / span) * (W - 2 * PAD));
  const y = (v: number) => r1(PAD + (1 - (Math.min(yMax, Math.max(yMin, v)) - yMin) / (yMax - yMin || 1)) * (H - 2 * PAD));
  const pctX = (t: number) => `${r1((x(t) / W) * 100)}%`;
  const pctY = (v: number) => `${r1((y(v) / H) * 100)}%`;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => yMin + f * (yMax - yMin));
  const xTicks = points.length === 1 ? [t0] : [t0, t0 + span / 2, t1];
  const d = points.map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p.t.getTime())},${y(p.v)}`).join(' ');
  const desc = `${o.title}: ${points.length} points from ${points[0]!.t.toISOString().slice(0, 10)} to ${points[points.length - 1]!.t.toISOString().slice(0, 10)}, latest ${o.format(points[points.length - 1]!.v)}`;
  const xAlign = (i: number) => (xTicks.length === 1 ? 'mid' : i === 0 ? 'start' : i === xTicks.length - 1 ? 'end' : 'mid');
  return html`<figure class="chart ${o.cls ?? ''}">
<div class="chart-y" aria-hidden="true">${ticks.map((v) => html`<span class="chart-label" style="top:${pctY(v)}">${o.format(v)}</span>`)}</div>
<div class="chart-plot"><svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${desc}" preserveAspectRatio="xMidYMid meet">
<title>${desc}</title>
${ticks.map((v) => html`<line x1="0" x2="${W}" y1="${y(v)}" y2="${y(v)}" class="grid"/>`)}
${(o.refs ?? []).map((r) => html`<line x1="0" x2="${W}" y1="${y(r.v)}" y2="${y(r.v)}" class="ref ${r.cls ?? ''}"/>`)}
<path d="${d}" class="line"/>
${points.map((p) => html`<circle cx="${x(p.t.getTime())}" cy="${y(p.v)}" r="3" class="pt"><title>${p.t.toISOString().slice(0, 10)}: ${o.format(p.v)}</title></circle>`)}
</svg>${(o.refs ?? []).map((r) => html`<span class="chart-label chart-ref" aria-hidden="true" style="top:${pctY(r.v)}">${r.label}</span>`)}</div>
<div class="chart-x" aria-hidden="true">${xTicks.map((t, i) => html`<span class="chart-label ${xAlign(i)}" style="left:${pctX(t)}">${new Date(t).toISOString().slice(5, 10)}</span>`)}</div>
</figure>`;
}

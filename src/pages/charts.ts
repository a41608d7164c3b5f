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

/** A line chart over time with axes, grid lines, reference lines and a tooltip per point. */
export function lineChart(points: readonly Point[], o: LineChartOptions): SafeHtml {
  const W = 640;
  const H = 220;
  const L = 64;
  const R = 12;
  const T = 14;
  const B = 30;
  if (points.length === 0) return html`<p class="muted">No reports in this period.</p>`;
  const values = [...points.map((p) => p.v), ...(o.refs ?? []).map((r) => r.v)];
  const yMin = o.yMin ?? 0;
  const yMax = o.yMax ?? niceMax(Math.max(...values) * 1.1);
  const t0 = points[0]!.t.getTime();
  const t1 = points[points.length - 1]!.t.getTime();
  const span = Math.max(1, t1 - t0);
  const x = (t: number) => r1(points.length === 1 ? L + (W - L - R) / 2 : L + ((t - t0) / span) * (W - L - R));
  const y = (v: number) => r1(T + (1 - (Math.min(yMax, Math.max(yMin, v)) - yMin) / (yMax - yMin || 1)) * (H - T - B));
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => yMin + f * (yMax - yMin));
  const xTicks = points.length === 1 ? [t0] : [t0, t0 + span / 2, t1];
  const d = points.map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p.t.getTime())},${y(p.v)}`).join(' ');
  const desc = `${o.title}: ${points.length} points from ${points[0]!.t.toISOString().slice(0, 10)} to ${points[points.length - 1]!.t.toISOString().slice(0, 10)}, latest ${o.format(points[points.length - 1]!.v)}`;
  return html`<svg class="chart ${o.cls ?? ''}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${desc}" preserveAspectRatio="xMidYMid meet">
<title>${desc}</title>
${ticks.map((v) => html`<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" class="grid"/><text x="${L - 6}" y="${y(v) + 4}" text-anchor="end" class="axis">${o.format(v)}</text>`)}
${xTicks.map((t, i) => html`<text x="${x(t)}" y="${H - 8}" text-anchor="${i === 0 && xTicks.length > 1 ? 'start' : i === xTicks.length - 1 && xTicks.length > 1 ? 'end' : 'middle'}" class="axis">${new Date(t).toISOString().slice(5, 10)}</text>`)}
${(o.refs ?? []).map((r) => html`<line x1="${L}" x2="${W - R}" y1="${y(r.v)}" y2="${y(r.v)}" class="ref ${r.cls ?? ''}"/><text x="${W - R - 4}" y="${y(r.v) - 4}" text-anchor="end" class="ref-label">${r.label}</text>`)}
<path d="${d}" class="line"/>
${points.map((p) => html`<circle cx="${x(p.t.getTime())}" cy="${y(p.v)}" r="3" class="pt"><title>${p.t.toISOString().slice(0, 10)}: ${o.format(p.v)}</title></circle>`)}
</svg>`;
}

// /drift: servers whose tool manifests changed (from the drift service's signed baselines) and a
// form that checks a server now through the same GetDrift the API answers /api/drift with.
import { ObservatoryError, PROBLEMS } from '../errors.js';
import type { Services } from '../services/index.js';
import type { CallContext } from '../services/context.js';
import { fmtInt, fmtTime } from './format.js';
import { html, type SafeHtml } from './html.js';
import { page } from './layout.js';
import { serverCardSection, serverHref } from './monitor.js';
import { cutAt, type DiffGap, type DiffLine } from '../domain/text-diff.js';
import { DRIFT_PAGE_LIMITS, type ShownPart } from '../services/drift.js';

const PART_WORDS: Record<string, string> = {
  description: 'description',
  input_schema: 'input schema',
  output_schema: 'output schema',
  annotations: 'annotations',
  title: 'title',
  arguments: 'arguments',
  name: 'name',
  mime_type: 'MIME type',
};
/** The context parts as people read them (an entry's kind in the singular). */
const CONTEXT_WORDS: Record<string, { list: string; one: string }> = {
  instructions: { list: 'instructions', one: 'instructions' },
  prompts: { list: 'prompts', one: 'prompt' },
  resources: { list: 'resources', one: 'resource' },
  resource_templates: { list: 'resource templates', one: 'resource template' },
};
const shortHash = (h: string | null) => (h ? h.slice(0, 12) : 'absent');

/** A tool name as the page shows it: names are the servers' own, so a long one is cut. */
const toolName = (n: string) => (n.length > 200 ? `${cutAt(n, 200)}…` : n);

/** A line diff (or a whole text) as a block people read: removed lines red with "−", added green with "+", long unchanged runs folded; or why it is not shown. */
function shownPart(p: ShownPart): SafeHtml {
  if (p.kind === 'unknown') return html`<p class="small muted" data-shown="unknown">Only the hashes are known: a baseline recorded before texts were stored, or after its server had stored its day's allowance of text.</p>`;
  if (p.kind === 'too_long') return html`<p class="small muted" data-shown="too_long">This part is ${fmtInt(p.bytes)} bytes, more than the ${fmtInt(DRIFT_PAGE_LIMITS.partTextBytes)} this page shows of one part: compare the hashes above.</p>`;
  if (p.kind === 'over_page') return html`<p class="small muted" data-shown="over_page">Not shown: this page already holds as much text as it shows at once (newest drifts first).</p>`;
  const row = (l: DiffLine | DiffGap) =>
    l.op === '…'
      ? html`<span class="gap">… ${fmtInt(l.count)} unchanged line${l.count === 1 ? '' : 's'}</span>`
      : l.op === '-'
        ? html`<del>− ${l.text}</del>`
        : l.op === '+'
          ? html`<ins>+ ${l.text}</ins>`
          : html`<span>  ${l.text}</span>`;
  const more = p.hidden > 0 ? html`<span class="gap" data-shown="hidden">… ${fmtInt(p.hidden)} more line${p.hidden === 1 ? '' : 's'} not shown here</span>` : '';
  return html`<pre class="textdiff">${p.lines.map(row)}${more}</pre>`;
}

/** A whole added or removed tool: the text of each of its parts. */
function toolText(kind: 'added' | 'removed', t: { name: string; parts: { part: string; text: ShownPart }[] }): SafeHtml {
  const name = toolName(t.name);
  const known = t.parts.filter((p) => p.text.kind !== 'unknown');
  return html`<details class="tooldiff" data-tool="${name}" data-change="${kind}"><summary>${kind === 'added' ? html`<ins>+ ${name}</ins> added` : html`<del>− ${name}</del> removed`}</summary>
${known.length === 0 ? html`<p class="small muted" data-shown="unknown">Its text was not kept by that baseline (recorded before texts were stored, or after its server had stored its day's allowance of text).</p>` : known.map((p) => html`<h4>${PART_WORDS[p.part] ?? p.part}</h4>${shownPart(p.text)}`)}
</details>`;
}

type DriftView = Awaited<ReturnType<Services['drift']['listDrifts']>>[number];

/** What changed of a server's context in one drift: a table of the changes, then the text of each. */
function contextSection(c: NonNullable<DriftView['context']>): SafeHtml {
  const rows = [
    ...(c.instructions ? [html`<tr data-part="instructions"><td><b>instructions</b></td><td>changed</td><td class="hide-sm"><code><del>${shortHash(c.instructions.before)}</del></code></td><td class="hide-sm"><code><ins>${shortHash(c.instructions.after)}</ins></code></td></tr>`] : []),
    ...c.entries.map((e) => {
      const kind = CONTEXT_WORDS[e.part]?.one ?? e.part;
      const name = toolName(e.key);
      if (e.change === 'changed') {
        return e.parts.map(
          (p) => html`<tr data-part="${e.part}"><td><b>${name}</b> <span class="muted">(${kind})</span></td><td>${PART_WORDS[p.part] ?? p.part} changed</td><td class="hide-sm"><code><del>${shortHash(p.before)}</del></code></td><td class="hide-sm"><code><ins>${shortHash(p.after)}</ins></code></td></tr>`,
        );
      }
      return html`<tr data-part="${e.part}"><td>${e.change === 'added' ? html`<ins>${name}</ins>` : html`<del>${name}</del>`} <span class="muted">(${kind})</span></td><td>${kind} ${e.change}</td><td class="hide-sm">–</td><td class="hide-sm">–</td></tr>`;
    }),
  ];
  return html`<h4>What else the server gives the model</h4>
<div class="table-wrap"><table class="diff context"><thead><tr><th>Instructions, prompt or resource</th><th>Change</th><th class="hide-sm">Before (sha-256)</th><th class="hide-sm">After (sha-256)</th></tr></thead><tbody>
${rows}
${c.more > 0 ? html`<tr class="more"><td colspan="4" class="muted" data-more-context="${c.more}">… and ${fmtInt(c.more)} more prompt${c.more === 1 ? '' : 's'} or resource${c.more === 1 ? '' : 's'} added, removed or changed, not detailed here</td></tr>` : ''}
</tbody></table></div>
${c.instructions ? html`<div class="tooldiff" data-context="instructions"><h4>instructions</h4>${shownPart(c.instructions.diff)}</div>` : ''}
${c.entries.map((e) =>
  e.change === 'changed'
    ? e.parts.map((p) => html`<div class="tooldiff" data-context="${e.part}" data-item="${toolName(e.key)}" data-part="${p.part}"><h4>${toolName(e.key)} · ${PART_WORDS[p.part] ?? p.part}</h4>${shownPart(p.diff)}</div>`)
    : html`<details class="tooldiff" data-context="${e.part}" data-item="${toolName(e.key)}" data-change="${e.change}"><summary>${e.change === 'added' ? html`<ins>+ ${toolName(e.key)}</ins> added` : html`<del>− ${toolName(e.key)}</del> removed`}</summary>${e.parts.map((p) => html`<h4>${PART_WORDS[p.part] ?? p.part}</h4>${shownPart(p.diff)}`)}</details>`,
)}`;
}

/** Renders /drift; `server` (the form's field) runs a live check first. Returns the HTTP status too. */
export async function driftPage(services: Services, q: { server?: string }, ctx?: CallContext): Promise<{ status: number; body: SafeHtml }> {
  let check: SafeHtml = html``;
  let status = 200;
  /** Set once the check recorded a drift: the list below must show it (its anchor is linked). */
  let recorded: number | undefined;
  const target = q.server?.trim();
  if (q.server !== undefined) {
    try {
      const r = await services.drift.getDrift({ server: q.server }, ctx);
      if (r.driftDetected) recorded = performance.now();
      const changed = r.toolsChanged ?? [];
      const toolDrift = (r.toolsAdded ?? []).length + (r.toolsRemoved ?? []).length + changed.length > 0 || (r.previousManifestHash !== undefined && r.previousManifestHash !== r.manifestHash);
      // Shown a few dozen at most: the list below details each drift within the page's bounds.
      const contextChanges = r.contextChanges ?? [];
      const unavailable = (r.context ?? []).filter((c) => c.status === 'unavailable' && c.detail !== undefined);
      check = html`<section class="notice ${r.driftDetected ? 'err' : 'ok'}" id="check-result">
<b>${r.name}</b>: ${
        r.previousBaselineAt === undefined
          ? html`first baseline recorded (${fmtInt(r.toolCount)} tools); later checks compare against it.`
          : r.driftDetected
            ? html`<b>${toolDrift && r.contextDriftDetected ? 'the tool manifest and what else the server gives the model changed' : toolDrift ? 'the tool manifest changed' : 'what the server gives the model besides its tools changed'}</b> since the baseline of ${fmtTime(r.previousBaselineAt)}.`
            : html`no change since the baseline of ${fmtTime(r.previousBaselineAt)} (${fmtInt(r.toolCount)} tools).`
      }
${
  r.driftDetected
    ? html`<ul class="diff">${(r.toolsAdded ?? []).map((n) => html`<li><ins>+ ${toolName(n)}</ins> added</li>`)}${(r.toolsRemoved ?? []).map((n) => html`<li><del>− ${toolName(n)}</del> removed</li>`)}${changed.map(
        (c) => html`<li><b>${toolName(c.name ?? '')}</b>: ${(c.changes ?? []).map((p) => PART_WORDS[p] ?? p).join(', ')} changed</li>`,
      )}${contextChanges.slice(0, 50).map((c) => {
        const kind = CONTEXT_WORDS[c.part ?? '']?.one ?? c.part;
        if (c.part === 'instructions') return html`<li data-context="instructions"><b>the server's instructions</b> changed</li>`;
        const name = toolName(c.name ?? '');
        return c.change === 'added'
          ? html`<li data-context="${c.part}"><ins>+ ${name}</ins> (${kind}) added</li>`
          : c.change === 'removed'
            ? html`<li data-context="${c.part}"><del>− ${name}</del> (${kind}) removed</li>`
            : html`<li data-context="${c.part}"><b>${name}</b> (${kind}): ${(c.changes ?? []).map((p) => PART_WORDS[p] ?? p).join(', ')} changed</li>`;
      })}${contextChanges.length > 50 ? html`<li class="muted">… and ${fmtInt(contextChanges.length - 50)} more changes of prompts and resources</li>` : ''}</ul>`
    : ''
}
${r.driftDetected ? html`<p><a href="#drift-${r.baselineId}">Read the text diff of each change below.</a></p>` : ''}
${
  unavailable.length > 0
    ? html`<p class="small" data-unavailable>Not compared this time (the last reading stands): ${unavailable.map((c) => html`<span data-part="${c.part}">${CONTEXT_WORDS[c.part ?? '']?.list ?? c.part}: ${c.detail}</span>`)}</p>`
    : ''
}
<p class="small">Baseline ${fmtTime(r.baselineAt)} · manifest <code>${shortHash(r.manifestHash ?? null)}</code> · signed receipt <a href="/v1/receipt/${r.receiptId}"><code>${r.receiptId}</code></a> · MCP <span data-field="protocol_version">${r.protocolVersion}</span> over ${r.transport}</p>
</section>
${serverCardSection(r.serverCard)}`;
    } catch (err) {
      if (!(err instanceof ObservatoryError)) throw err;
      status = err.status;
      check = html`<section class="notice err" id="check-result" role="alert"><b>${PROBLEMS[err.problem].title}.</b> ${err.rawMessage}</section>`;
    }
  }
  const [drifts, baselines, cards] = await Promise.all([services.drift.listDrifts(50, recorded), services.drift.listBaselines(100), services.mcpProbe.cardMismatches(50)]);
  const body = html`
<h1>Tool manifest drift</h1>
<p class="muted">A server's tool descriptions and schemas are what an agent relies on, and so is what else the server gives the model: its instructions (clients put them in the system prompt), its prompts and its resources. Each check records a signed baseline of them; a later check that finds any of them changed is drift (and raises the <span class="flag">tool_manifest_drift</span> flag for 7 days).</p>
<form class="inline" method="get" action="/drift">
  <label for="server">Check a tracked server now</label>
  <input id="server" name="server" type="text" required placeholder="https://example.com/mcp or its name" value="${target ?? ''}">
  <button type="submit">Check</button>
</form>
${check}

<h2>Servers whose manifest changed</h2>
${
  drifts.length === 0
    ? html`<p class="muted">No drift detected yet.</p>`
    : drifts.map(
        (d) => html`<article class="drift" id="drift-${d.baselineId}" data-server="${d.serverUrl}"><h3><a href="${serverHref(d.slug)}">${d.name}</a></h3>
<p class="small muted">Changed between the baseline of ${fmtTime(d.previousBaselineAt)} and the baseline of ${fmtTime(d.baselineAt)} · ${fmtInt(d.toolCount)} tools now · receipt <a href="/v1/receipt/${d.receiptId}"><code>${d.receiptId}</code></a></p>
<div class="table-wrap"><table class="diff"><thead><tr><th>Tool</th><th>Change</th><th class="hide-sm">Before (sha-256)</th><th class="hide-sm">After (sha-256)</th></tr></thead><tbody>
${d.added.map(({ name: n }) => html`<tr><td><ins>${toolName(n)}</ins></td><td>tool added</td><td class="hide-sm">–</td><td class="hide-sm">–</td></tr>`)}
${d.removed.map(({ name: n }) => html`<tr><td><del>${toolName(n)}</del></td><td>tool removed</td><td class="hide-sm">–</td><td class="hide-sm">–</td></tr>`)}
${d.changed.map((c) =>
  c.parts.map(
    (p) => html`<tr><td><b>${toolName(c.name)}</b></td><td>${PART_WORDS[p.part] ?? p.part} changed</td><td class="hide-sm"><code><del>${shortHash(p.before)}</del></code></td><td class="hide-sm"><code><ins>${shortHash(p.after)}</ins></code></td></tr>`,
  ),
)}
${d.moreTools > 0 ? html`<tr class="more"><td colspan="4" class="muted" data-more-tools="${d.moreTools}">… and ${fmtInt(d.moreTools)} more tool${d.moreTools === 1 ? '' : 's'} added, removed or changed, not detailed here</td></tr>` : ''}
</tbody></table></div>
${d.changed.map((c) =>
  c.parts.map((p) => html`<div class="tooldiff" data-tool="${toolName(c.name)}" data-part="${p.part}"><h4>${toolName(c.name)} · ${PART_WORDS[p.part] ?? p.part}</h4>${shownPart(p.diff)}</div>`),
)}
${d.added.map((t) => toolText('added', t))}${d.removed.map((t) => toolText('removed', t))}
${d.context ? contextSection(d.context) : ''}
</article>`,
      )
}

<h2 id="server-cards">Server Cards that contradict their server</h2>
<p class="muted small">A Server Card is what a server claims before anyone connects (SEP-2127). Each probe compares it with what the server then says; a contradiction raises <span class="flag">server_card_mismatch</span> for 7 days. A card is a claim, never evidence: it changes no score.</p>
${
  cards.length === 0
    ? html`<p class="muted">No card contradicts its server.</p>`
    : html`<div class="table-wrap"><table class="cards"><thead><tr><th>Server</th><th>Card</th><th>What differs</th><th>Checked</th></tr></thead><tbody>${cards.map(
        (c) => html`<tr data-server="${c.serverUrl}"><td><a href="${serverHref(c.slug)}">${c.name}</a></td><td><a href="${c.serverCard.cardUrl}">${c.serverCard.cardUrl}</a></td><td><ul class="card-diff">${(c.serverCard.differences ?? []).map((d) => html`<li data-field="${d.field}">${d.detail}</li>`)}</ul></td><td>${fmtTime(c.serverCard.checkedAt)}</td></tr>`,
      )}</tbody></table></div>`
}

<h2>Latest baselines</h2>
${
  baselines.length === 0
    ? html`<p class="muted">No baselines yet: check a server above.</p>`
    : html`<div class="table-wrap"><table class="baselines"><thead><tr><th>Server</th><th>Baseline</th><th class="num">Tools</th><th>Drift</th><th class="hide-sm">Manifest</th></tr></thead><tbody>${baselines.map(
        (b) => html`<tr><td><a href="${serverHref(b.slug)}">${b.name}</a></td><td>${fmtTime(b.baselineAt)}</td><td class="num">${fmtInt(b.toolCount)}</td><td>${b.driftDetected ? html`<span class="flag">changed</span>` : 'unchanged'}</td><td class="hide-sm"><code>${shortHash(b.manifestHash)}</code></td></tr>`,
      )}</tbody></table></div>`
}
<p class="small muted">Baselines keep hashes (RFC 8785 canonical JSON, SHA-256) of each tool's description, input and output schema and annotations, of the server's instructions, and of each prompt's title, description and arguments and each resource's and resource template's name, title, description and MIME type, and the canonical text under each hash, so a diff says which part of which tool, prompt or resource changed and how (schemas are shown as JSON with sorted keys). JSON: <a href="/api/drift?server=">/api/drift?server=…</a></p>
`;
  return { status, body: page('Drift', 'drift', body) };
}

// The one escaping helper of the pages: a tagged template that escapes every interpolated value
// unless it is markup this same tag produced. Server names, tool names, descriptions and URLs
// are data reported by strangers; nothing reaches a page without passing through here.

/** Markup built by `html` (already escaped); the only thing interpolated verbatim. */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

function escapeValue(v: unknown): string {
  if (v instanceof SafeHtml) return v.value;
  if (v === null || v === undefined || v === false) return '';
  if (Array.isArray(v)) return v.map(escapeValue).join('');
  return String(v).replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** html`<p>${name}</p>`: every `${}` is escaped (arrays are joined; null/undefined/false render nothing). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += escapeValue(values[i]) + strings[i + 1]!;
  return new SafeHtml(out);
}

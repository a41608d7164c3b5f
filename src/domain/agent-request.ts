// What a person means by the text they send the A2A skill (docs/agents.md "Text the skill
// understands"). Pure: text in, the skill and the server it names out. The server is cut out of
// the words around it the way a reader would: a Markdown link gives its target, angle brackets
// and quotes are unwrapped, sentence punctuation and trailing courtesies ("please", "thanks") are
// never part of it, and a placeholder ("<server>", "it", "the server") names no server at all.

export type AgentSkillId = 'check_trust' | 'preflight';

export type UnderstoodRequest =
  /** The text asks `skill` about `server` (a URL, name or slug, as the user wrote it, cleaned). */
  | { kind: 'ask'; skill: AgentSkillId; server: string }
  /** The text asks for `skill` but names no server: ask the user which one. */
  | { kind: 'needs_server'; skill: AgentSkillId }
  /** Not a request either skill answers. */
  | { kind: 'unknown' };

/** Longest server reference taken from a text (a URL or a name); longer text is not a reference. */
export const MAX_SERVER_REFERENCE = 2048;
/** How many placeholders or quotations in one text are looked through before it counts as naming no server. */
const MAX_NESTED_READINGS = 8;
/** A bare name (no dot, slash or scheme) of more words than this is a sentence, not a name. */
const MAX_NAME_WORDS = 3;

// Leading words that carry no meaning for the request: greetings, courtesies, "could you".
const LEAD_IN =
  /^(?:(?:hi|hello|hey|ok|okay|so|well|please|pls|plz|kindly|yo|now)\b[\s,!.:;-]*|(?:could|can|would|will)\s+(?:you|u)\b\s*(?:please\b\s*)?|i\s+(?:want|need|would\s+like|'d\s+like)\s+(?:to\s+(?:know|see|get|have)\s+)?|(?:let\s+me\s+know|tell\s+me|show\s+me|give\s+me|get\s+me|fetch|find|look\s+up|lookup|run|do|perform|get|check)\b\s*)+/i;

// Words between the skill's name and the server: "trust score for", "preflight check on", ":".
const CONNECTOR = /^(?:[\s:=,-]+|(?:for|of|on|about|regarding|against|to|at|with|the|a|an)(?=[\s:,;!?\u2026]|\.+(?:\s|$)|$))*/i;

// Courtesies and fillers that may trail a request ("... please", "... thanks!"). Looked for in
// the last FILLER_TAIL characters only: the expression is tried from every position of the text,
// and from each one inside a long run of separators (or of fillers) it runs to the end and back,
// so a 4 KB message of them cost milliseconds (quadratic); a real chain of courtesies is short.
const FILLER_TAIL = 96;
const TRAILING_FILLER = /(?:[\s,;:.!?-]+(?:please|pls|plz|thanks|thank\s+you|thx|ty|now|right\s+now|asap|for\s+me|again|too|as\s+well|if\s+you\s+can|if\s+possible))+[\s.!?]*$/i;

// Words that stand in for a server without naming one.
const PLACEHOLDER = new Set([
  '',
  'it',
  'this',
  'that',
  'them',
  'one',
  'this one',
  'that one',
  'something',
  'anything',
  'x',
  'server',
  'servers',
  'the server',
  'a server',
  'my server',
  'your server',
  'some server',
  'mcp',
  'mcp server',
  'an mcp server',
  'the mcp server',
  'my mcp server',
  'url',
  'a url',
  'the url',
  'server url',
  'name',
  'slug',
  'target',
  'server name',
  'name or url',
  'url or name',
  'server url or name',
  'host',
  'endpoint',
  'example',
  '...',
  '…',
]);

interface Trigger {
  skill: AgentSkillId;
  /** Matches at the start of the (lead-in stripped) text; the server follows the match. */
  prefix?: RegExp;
  /** Matches the whole text; group 1 is the server (questions that put the server in the middle). */
  around?: RegExp;
}

// Pre-flight first: "run a preflight trust check on X" is a pre-flight.
const TRIGGERS: readonly Trigger[] = [
  { skill: 'preflight', prefix: /^(?:an?\s+)?pre[\s-]?flight(?:\s+(?:trust\s+)?(?:check|verdict|test))?(?=$|[\s:,.!?=-])/i },
  { skill: 'preflight', prefix: /^(?:should|may|can|could)\s+i\s+(?:safely\s+)?(?:call|use|connect\s+to|invoke|rely\s+on)(?=$|\s)/i },
  { skill: 'preflight', prefix: /^is\s+it\s+safe\s+to\s+(?:call|use|connect\s+to|invoke)(?=$|\s)/i },
  { skill: 'preflight', prefix: /^vet(?=$|\s)/i },
  { skill: 'preflight', around: /^is\s+(.+?)\s+safe(?:\s+to\s+(?:call|use|connect\s+to|invoke))?(?:\s+(?:now|today))?[\s.!?]*$/i },
  {
    skill: 'check_trust',
    prefix:
      /^(?:what(?:'s|\s+is)\s+)?(?:the\s+)?(?:check\s+)?(?:(?:current|latest)\s+)?trust(?:[\s-]*(?:score|rating|record|level|report|status|verdict))?(?:\s+check)?(?=$|[\s:,.!?=-])/i,
  },
  { skill: 'check_trust', prefix: /^how\s+(?:trustworthy|trusted|reliable)\s+is(?=$|\s)/i },
  { skill: 'check_trust', prefix: /^(?:what(?:'s|\s+is)\s+)?(?:the\s+)?reputation(?=$|\s)/i },
  { skill: 'check_trust', around: /^(?:is|are)\s+(.+?)\s+(?:trustworthy|trusted|reliable)[\s.!?]*$/i },
  // The server is the text up to its last character that is not sentence punctuation: matched
  // greedily, as a lazy (.+?) before [\s.!?]*$ rescanned the rest of a run of punctuation at each
  // character (quadratic; "…" is three dots after NFKC, so 4,000 of them took 200 ms).
  { skill: 'check_trust', around: /^(?:can|should)\s+i\s+trust\s+(.*[^\s.!?]|.)[\s.!?]*$/i },
];

/** Straight quotes for the typographic ones; one space for any run of white space. */
function normalise(text: string): string {
  return text
    .normalize('NFKC')
    .replace(/[\u2018\u2019\u201a\u201b\u2032]/g, "'")
    .replace(/[\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb]/g, '"')
    .replace(/\s+/g, ' ')
    .trim();
}

function stripLeadIn(text: string): string {
  let t = text;
  for (;;) {
    const next = t.replace(LEAD_IN, '');
    if (next === t) return t;
    t = next;
  }
}

/**
 * The most characters a text may have, after NFKC, to be read as a request: the longest reference
 * with the words around it, twice over. NFKC makes up to 18 characters of one ("\ufdfa"), so 4 KB
 * of such characters were read as 73 KB of text.
 */
const MAX_READ = MAX_SERVER_REFERENCE * 4;

/** Reads what a person asks of the A2A skill. */
export function understandRequest(text: string): UnderstoodRequest {
  const normal = normalise(text);
  if (normal.length > MAX_READ) return { kind: 'unknown' };
  const t = stripLeadIn(normal);
  for (const trigger of TRIGGERS) {
    if (trigger.around) {
      const m = trigger.around.exec(t);
      if (!m) continue;
      const server = extractServer(m[1]!);
      return server === null ? { kind: 'needs_server', skill: trigger.skill } : { kind: 'ask', skill: trigger.skill, server };
    }
    const m = trigger.prefix!.exec(t);
    if (!m) continue;
    const rest = t.slice(m[0].length);
    const server = extractServer(rest.replace(CONNECTOR, ''));
    return server === null ? { kind: 'needs_server', skill: trigger.skill } : { kind: 'ask', skill: trigger.skill, server };
  }
  return { kind: 'unknown' };
}

// "it's X", "the server is X", "use X": words in front of the server in an answer to "which server?".
const FOLLOW_UP_LEAD_IN =
  /^(?:(?:it(?:'s|\s+is)|that(?:'s|\s+is)|the\s+(?:server|one|url|name)\s+is|server|url|name|here(?:'s|\s+is|\s+it\s+is)?|use|try|for|of|on|about)(?=[\s:,-]|$)[\s:,-]*)+/i;

/**
 * Reads the answer to "which server?" (a follow-up message): a whole request ("trust score for
 * X"), or just the server, perhaps in a sentence ("it's X", "use X please"). Null when it names none.
 */
export function understandFollowUp(text: string, skill: AgentSkillId): UnderstoodRequest {
  const asked = understandRequest(text);
  if (asked.kind !== 'unknown') return asked;
  const normal = normalise(text);
  if (normal.length > MAX_READ) return { kind: 'needs_server', skill };
  const t = stripLeadIn(normal).replace(FOLLOW_UP_LEAD_IN, '');
  const server = extractServer(t);
  return server === null ? { kind: 'needs_server', skill } : { kind: 'ask', skill, server };
}

// Punctuation that ends a sentence or wraps a reference, never the last character of a server.
// Found by scanning back from the end: the expression /[...]+$/ is tried from every position and
// runs to the end of each run of punctuation, quadratic in a long run that does not end the text.
const TRAILING_PUNCT = new Set('.,;:!?\'"`)]}>\u2026');
const LEADING_PUNCT = /^[(\[{<'"`]+/;
const OPENER: Record<string, string> = { ')': '(', ']': '[', '}': '{' };

/** Where the run of trailing punctuation of `r` starts (r.length: none). */
function trailingPunctuation(r: string): number {
  let i = r.length;
  while (i > 0 && TRAILING_PUNCT.has(r[i - 1]!)) i--;
  return i;
}

/** Drops trailing punctuation; a closing bracket stays when the reference itself opened it. */
function trimPunctuation(ref: string): string {
  let r = ref.replace(LEADING_PUNCT, '');
  for (;;) {
    let start = trailingPunctuation(r);
    if (start === r.length) break;
    // Keep balanced closers: https://example.com/wiki/Foo_(bar) keeps its ")". The brackets of
    // the text before the run are counted once, and each closer kept joins that text (counting
    // them again for every closer made a run of 2,000 of them cost 200 ms).
    const opens = { '(': 0, '[': 0, '{': 0 } as Record<string, number>;
    const closes = { ')': 0, ']': 0, '}': 0 } as Record<string, number>;
    for (let i = 0; i < start; i++) {
      const c = r[i]!;
      if (c in opens) opens[c]!++;
      else if (c in closes) closes[c]!++;
    }
    while (start < r.length) {
      const c = r[start]!;
      const open = OPENER[c];
      if (open === undefined || opens[open]! <= closes[c]!) break;
      closes[c]!++;
      start++;
    }
    if (start === r.length) break;
    r = r.slice(0, start);
  }
  return r;
}

// A scheme is a few letters ("https", "git+ssh"): at most 32 characters, so that a long word of
// letters, dots and hyphens is not scanned to its end from each of its word boundaries.
const URL_TOKEN = /\b[a-z][a-z0-9+.-]{0,31}:\/\/[^\s<>"'`]+/i;
// A host (name with a real last label, IPv4 or localhost; optional port and path), or an MCP
// Registry name (reverse-DNS namespace / name). "e.g." and "and/or" are neither.
const REFERENCE_TOKEN =
  /^(?:(?:(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*[a-z0-9]|\d{1,3}(?:\.\d{1,3}){3}|localhost)(?::\d{1,5})?(?:\/\S*)?|[a-z0-9-]+(?:\.[a-z0-9-]+)+\/[a-z0-9._-]+)$/i;

function isPlaceholder(s: string): boolean {
  const k = s.toLowerCase().trim();
  return PLACEHOLDER.has(k) || /^<[^<>]*>$|^\{[^{}]*\}$|^\[[^[\]]*\]$/.test(k);
}

/**
 * The server a fragment of text refers to, or null when it names none. Priority: a Markdown
 * link's target, a URL with a scheme, text in angle brackets or quotes, a host/path or registry
 * name token, and last a short bare name ("Acme Weather"), courtesies and placeholders removed.
 */
export function extractServer(fragment: string, depth = 0): string | null {
  // Each placeholder in angle brackets ("<server>") or quoted text is read again without it; a
  // text of hundreds of them is not a request (each reading is linear, their number is not).
  if (depth > MAX_NESTED_READINGS) return null;
  let t = normalise(fragment);
  if (t === '' || t.length > MAX_SERVER_REFERENCE * 2) return null;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(t)) return null;

  // [label](target): the target is what the link points at. Neither holds another link's start
  // ("[" in a label, "](" in a target): each "[" of the text is tried, and from each one the
  // expression ran to the end of the text, quadratic in a text of thousands of them.
  const link = /\[([^[\]]*)\]\(\s*<?((?:(?!\]\()[^\s<>])+?)>?(?:\s+"[^"]*")?\s*\)/.exec(t);
  if (link) return finish(link[2]!) ?? finish(link[1]!);

  // <...>: an autolink or a placeholder.
  const angle = /<([^<>]+)>/.exec(t);
  if (angle) {
    const inner = angle[1]!.trim();
    if (isPlaceholder(inner) || !(URL_TOKEN.test(inner) || REFERENCE_TOKEN.test(inner))) {
      // "<server>": the user copied the usage text without filling it in.
      const outside = (t.slice(0, angle.index) + ' ' + t.slice(angle.index + angle[0].length)).trim();
      return outside === '' || isPlaceholder(trimPunctuation(outside)) ? null : extractServer(outside, depth + 1);
    }
    return finish(inner);
  }

  const url = URL_TOKEN.exec(t);
  if (url) return finish(url[0]);

  // "..." or '...' or `...`: the quoted text is the reference.
  const quoted = /"([^"]+)"|`([^`]+)`|(?:^|\s)'([^']+)'(?=$|[\s.,;:!?])/.exec(t);
  if (quoted) return extractServer(quoted[1] ?? quoted[2] ?? quoted[3]!, depth + 1);

  t = ` ${t}`;
  const tail = Math.max(0, t.length - FILLER_TAIL);
  t = (t.slice(0, tail) + t.slice(tail).replace(TRAILING_FILLER, '')).trim();
  const words = t.split(' ').map(trimPunctuation).filter((w) => w !== '');
  const token = words.find((w) => REFERENCE_TOKEN.test(w) && /[a-z]/i.test(w));
  if (token) return finish(token);

  // A bare name: drop articles in front and "server" behind; short, or it is a sentence.
  const bare = trimPunctuation(
    words
      .join(' ')
      .replace(/^(?:(?:the|a|an|my|your|server|named|called)\s+)+/i, '')
      .replace(/(?:\s+(?:mcp\s+)?server)$/i, '')
      .trim(),
  );
  if (isPlaceholder(bare) || bare.split(' ').length > MAX_NAME_WORDS) return null;
  return finish(bare);
}

function finish(ref: string): string | null {
  const r = trimPunctuation(ref.trim());
  if (r === '' || r.length > MAX_SERVER_REFERENCE || isPlaceholder(r)) return null;
  return r;
}

// The category classifier (DECISIONS.md): a keyword list per category, tried in this order;
// the first category with a matching keyword wins, `general` when none does. A keyword matches
// a word of the name, URL or a reported tool name when the word starts with it ("forecast"
// matches "forecasts", "git" matches "github"). Documented in docs/scoring.md.

export const CATEGORY_KEYWORDS: ReadonlyArray<readonly [string, readonly string[]]> = [
  ['weather', ['weather', 'forecast', 'climate', 'meteo', 'temperature']],
  ['finance', ['finance', 'financial', 'bank', 'payment', 'pay', 'stock', 'trading', 'crypto', 'invoice', 'accounting', 'stripe', 'wallet', 'price', 'currency', 'exchange']],
  ['compliance', ['compliance', 'gdpr', 'audit', 'regulation', 'regulatory', 'kyc', 'aml', 'legal', 'governance']],
  ['search', ['search', 'google', 'bing', 'brave', 'duckduckgo', 'tavily', 'perplexity', 'serp', 'lookup', 'crawl', 'scrape']],
  ['communication', ['slack', 'email', 'mail', 'gmail', 'chat', 'discord', 'telegram', 'sms', 'twilio', 'whatsapp', 'message', 'messaging', 'teams']],
  ['code', ['github', 'gitlab', 'git', 'code', 'coding', 'repo', 'repository', 'deploy', 'npm', 'compiler', 'lint', 'sentry', 'vercel', 'docker', 'kubernetes', 'terminal', 'shell']],
  ['data', ['database', 'sql', 'postgres', 'mysql', 'mongo', 'data', 'analytics', 'bigquery', 'snowflake', 'csv', 'redis', 'supabase', 'sqlite', 'warehouse', 'vector']],
  ['productivity', ['notion', 'calendar', 'todo', 'task', 'docs', 'document', 'sheet', 'spreadsheet', 'jira', 'linear', 'trello', 'asana', 'drive', 'note', 'notes', 'office']],
  ['transport', ['maps', 'map', 'route', 'routing', 'transit', 'flight', 'travel', 'uber', 'traffic', 'train', 'airline', 'geocode', 'navigation']],
  ['media', ['youtube', 'video', 'image', 'music', 'spotify', 'photo', 'media', 'podcast', 'audio', 'movie']],
  ['education', ['learn', 'course', 'education', 'school', 'quiz', 'tutor', 'wikipedia', 'arxiv', 'research', 'paper', 'student']],
  ['security', ['security', 'vuln', 'cve', 'scan', 'scanner', 'password', 'secret', 'threat', 'malware', 'firewall', 'pentest']],
  ['health', ['health', 'medical', 'medicine', 'fhir', 'doctor', 'patient', 'fitness', 'drug', 'clinic', 'hospital', 'nutrition']],
];

export const CATEGORIES: readonly string[] = [...CATEGORY_KEYWORDS.map(([c]) => c), 'general'];

function words(texts: readonly string[]): string[] {
  return texts.flatMap((t) => t.toLowerCase().split(/[^a-z0-9]+/)).filter((w) => w.length > 0);
}

export function classifyCategory(texts: readonly string[]): string {
  const ws = words(texts);
  for (const [category, keywords] of CATEGORY_KEYWORDS) {
    if (ws.some((w) => keywords.some((k) => w.startsWith(k)))) return category;
  }
  return 'general';
}

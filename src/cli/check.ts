// `observatory check <server-url>`: a CI gate. Asks an observatory for the signed agency-mcp-2026
// attestation of a server (GET /v1/compliance), prints it, and exits with its ci.exit_code:
// 0 PASS, 1 FAIL, 2 PARTIAL. 3 means the check itself could not be made (usage, network, 4xx/5xx).

import { checkFromBundle } from './bundle.js';

export const CHECK_USAGE = `usage: observatory check <server-url> [--observatory <base-url>] [--standard agency-mcp-2026] [--json]
       observatory check <server> --bundle <file> [--jwks <file-or-url>] [--json]

  Prints the compliance attestation of <server-url> and exits with its ci.exit_code
  (0 PASS, 1 FAIL, 2 PARTIAL; 3 when the check could not be made).
  With --bundle, decides offline from a pulled bundle (observatory bundle pull) and never calls
  the observatory: 0 PASS, 1 FAIL, 2 UNCERTAIN or UNRATED; 3 when the bundle is expired, badly
  signed or unreadable.
  --observatory  base URL of the observatory to ask (default: $OBSERVATORY_URL, else http://localhost:8080)
  --bundle       a bundle file written by observatory bundle pull
  --jwks         with --bundle: the pinned JWKS to verify it with (default: the JWKS inside the file)
  --json         print the full JSON attestation (or offline decision) instead of the summary`;

export const CHECK_ERROR_EXIT = 3;

interface Io {
  out: (line: string) => void;
  err: (line: string) => void;
  env: Record<string, string | undefined>;
  fetch?: typeof fetch;
}

/** Runs `observatory check`; src/cli.ts's runCli hands it an io whose lines are made terminal-safe. */
export async function checkCommand(args: string[], io: Io): Promise<number> {
  let server: string | undefined;
  let base = io.env.OBSERVATORY_URL ?? 'http://localhost:8080';
  let standard: string | undefined;
  let bundle: string | undefined;
  let jwks: string | undefined;
  let asJson = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--observatory' || a === '--standard' || a === '--bundle' || a === '--jwks') {
      const v = args[++i];
      if (!v) {
        io.err(`${a} needs a value\n${CHECK_USAGE}`);
        return CHECK_ERROR_EXIT;
      }
      if (a === '--observatory') base = v;
      else if (a === '--bundle') bundle = v;
      else if (a === '--jwks') jwks = v;
      else standard = v;
    } else if (a === '--json') asJson = true;
    else if (a === '-h' || a === '--help') {
      io.out(CHECK_USAGE);
      return 0;
    } else if (a.startsWith('-')) {
      io.err(`unknown option ${a}\n${CHECK_USAGE}`);
      return CHECK_ERROR_EXIT;
    } else if (server === undefined) server = a;
    else {
      io.err(`unexpected argument ${a}\n${CHECK_USAGE}`);
      return CHECK_ERROR_EXIT;
    }
  }
  if (!server) {
    io.err(CHECK_USAGE);
    return CHECK_ERROR_EXIT;
  }
  if (jwks !== undefined && bundle === undefined) {
    io.err(`--jwks is only read with --bundle\n${CHECK_USAGE}`);
    return CHECK_ERROR_EXIT;
  }
  // Offline: the verdict comes from the signed bundle; nothing is fetched (unless --jwks is a URL).
  if (bundle !== undefined) {
    if (standard !== undefined) {
      io.err('--standard asks for an online compliance attestation; a bundle carries trust verdicts: drop one of them');
      return CHECK_ERROR_EXIT;
    }
    return checkFromBundle(server, bundle, jwks, asJson, io);
  }
  let url: URL;
  try {
    url = new URL('/v1/compliance', base.replace(/\/+$/, '') + '/');
  } catch {
    io.err(`--observatory: not a URL: ${base}`);
    return CHECK_ERROR_EXIT;
  }
  url.searchParams.set('server', server);
  if (standard) url.searchParams.set('standard', standard);

  let res: Response;
  try {
    res = await (io.fetch ?? globalThis.fetch)(url, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(60_000) });
  } catch (err) {
    io.err(`observatory check: cannot reach ${url.origin}: ${(err as Error).message}`);
    return CHECK_ERROR_EXIT;
  }
  const text = await res.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    io.err(`observatory check: ${url.origin} answered ${res.status} with a non-JSON body`);
    return CHECK_ERROR_EXIT;
  }
  if (!res.ok) {
    io.err(`observatory check: ${res.status} ${String(body.code ?? '')}: ${String(body.detail ?? body.title ?? text.slice(0, 200))}`);
    return CHECK_ERROR_EXIT;
  }
  const ci = body.ci as { exit_code?: unknown; summary?: unknown } | undefined;
  if (!ci || typeof ci.exit_code !== 'number' || ![0, 1, 2].includes(ci.exit_code)) {
    io.err('observatory check: the answer carries no ci.exit_code');
    return CHECK_ERROR_EXIT;
  }
  if (asJson) io.out(JSON.stringify(body, null, 2));
  else {
    io.out(String(ci.summary));
    for (const d of (body.dimensions as { dimension: string; result: string; detail: string }[]) ?? []) io.out(`  ${d.result.padEnd(7)} ${d.dimension}: ${d.detail}`);
    io.out(`receipt ${String(body.receipt_id)} (verify: ${url.origin}/v1/receipt/${String(body.receipt_id)})`);
  }
  return ci.exit_code;
}

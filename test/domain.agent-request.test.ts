import { describe, expect, it } from 'vitest';
import { extractServer, understandFollowUp, understandRequest } from '../src/domain/agent-request.js';

// The A2A skill reads text like a person would (issue 19 item 2): the server is cut out of the
// words around it, and a request that names no server asks for one instead of inventing it.

const URL = 'https://weather.example.com/mcp';

describe('understandRequest: the server never carries punctuation or words around it', () => {
  const cases: [string, 'check_trust' | 'preflight', string][] = [
    [`trust score for ${URL}`, 'check_trust', URL],
    [`trust score for ${URL}.`, 'check_trust', URL],
    [`Trust score for ${URL}?`, 'check_trust', URL],
    [`trust score for ${URL}!`, 'check_trust', URL],
    [`trust score for ${URL}, please`, 'check_trust', URL],
    [`trust score for ${URL} please`, 'check_trust', URL],
    [`trust score for ${URL} please.`, 'check_trust', URL],
    [`trust score for ${URL} thanks!`, 'check_trust', URL],
    [`trust score for ${URL} thank you`, 'check_trust', URL],
    [`trust score for "${URL}"`, 'check_trust', URL],
    [`trust score for '${URL}'.`, 'check_trust', URL],
    [`trust score for \`${URL}\``, 'check_trust', URL],
    [`trust score for “${URL}”`, 'check_trust', URL],
    [`trust score for <${URL}>`, 'check_trust', URL],
    [`trust score for <${URL}>.`, 'check_trust', URL],
    [`trust score for (${URL})`, 'check_trust', URL],
    [`trust score for [the weather server](${URL})`, 'check_trust', URL],
    [`trust score for [${URL}](${URL}).`, 'check_trust', URL],
    [`trust score for [weather](<${URL}>)`, 'check_trust', URL],
    [`trust score for ${URL}… please`, 'check_trust', URL],
    [`trust score for ${URL} and tell me if it is safe`, 'check_trust', URL],
    [`trust score of ${URL}`, 'check_trust', URL],
    [`trust score: ${URL}`, 'check_trust', URL],
    [`trust-score ${URL}`, 'check_trust', URL],
    [`trust ${URL}`, 'check_trust', URL],
    [`TRUST SCORE FOR ${URL}`, 'check_trust', URL],
    [`check trust of ${URL}`, 'check_trust', URL],
    [`What is the trust score of ${URL}?`, 'check_trust', URL],
    [`what's the trust score for ${URL}?`, 'check_trust', URL],
    [`Hi! Could you please give me the trust score for ${URL}? Thanks`, 'check_trust', URL],
    [`please, trust score for ${URL}`, 'check_trust', URL],
    [`tell me the trust rating of ${URL}`, 'check_trust', URL],
    [`how trustworthy is ${URL}?`, 'check_trust', URL],
    [`is ${URL} trustworthy?`, 'check_trust', URL],
    [`can I trust ${URL}?`, 'check_trust', URL],
    [`trust score for   ${URL}  \n please`, 'check_trust', URL],
    ['trust score for weather.example.com/mcp', 'check_trust', 'weather.example.com/mcp'],
    ['trust score for weather.example.com/mcp.', 'check_trust', 'weather.example.com/mcp'],
    ['trust score for weather.example.com/mcp please', 'check_trust', 'weather.example.com/mcp'],
    ['trust score for the weather.example.com/mcp server', 'check_trust', 'weather.example.com/mcp'],
    ['trust score for e.g. weather.example.com/mcp', 'check_trust', 'weather.example.com/mcp'],
    ['trust score for io.github.acme/weather', 'check_trust', 'io.github.acme/weather'],
    ['trust score for io.github.acme/weather?', 'check_trust', 'io.github.acme/weather'],
    ["what's the trust score of 'io.github.acme/weather'?", 'check_trust', 'io.github.acme/weather'],
    ['trust score for io-github-acme-weather', 'check_trust', 'io-github-acme-weather'],
    ['trust score for localhost:8080/mcp', 'check_trust', 'localhost:8080/mcp'],
    ['trust score for a.example.com', 'check_trust', 'a.example.com'],
    ['trust score for Acme Weather please', 'check_trust', 'Acme Weather'],
    ['trust score for the Acme Weather server.', 'check_trust', 'Acme Weather'],
    ['https://example.com/wiki/Foo_(bar)', 'check_trust', ''],
    [`preflight ${URL}`, 'preflight', URL],
    [`preflight ${URL}.`, 'preflight', URL],
    [`pre-flight check for ${URL} please`, 'preflight', URL],
    [`Pre-flight: ${URL}`, 'preflight', URL],
    [`can you run a preflight check on <${URL}>?`, 'preflight', URL],
    [`run a preflight trust check on ${URL}`, 'preflight', URL],
    [`should I call ${URL}?`, 'preflight', URL],
    [`is it safe to use ${URL}?`, 'preflight', URL],
    [`is ${URL} safe to call?`, 'preflight', URL],
    [`vet ${URL}`, 'preflight', URL],
    ['preflight check for weather.example.com/mcp, thanks', 'preflight', 'weather.example.com/mcp'],
  ];
  for (const [text, skill, server] of cases) {
    if (server === '') continue;
    it(JSON.stringify(text), () => {
      expect(understandRequest(text)).toEqual({ kind: 'ask', skill, server });
    });
  }

  it('a URL keeps a closing bracket it opened itself', () => {
    expect(understandRequest('trust score for https://example.com/wiki/Foo_(bar).')).toEqual({ kind: 'ask', skill: 'check_trust', server: 'https://example.com/wiki/Foo_(bar)' });
    expect(understandRequest('trust score for (https://example.com/wiki/Foo_(bar))')).toEqual({ kind: 'ask', skill: 'check_trust', server: 'https://example.com/wiki/Foo_(bar)' });
  });

  it('a query string stays, a trailing question mark goes', () => {
    expect(understandRequest('trust score for https://x.example.com/mcp?region=eu?')).toEqual({ kind: 'ask', skill: 'check_trust', server: 'https://x.example.com/mcp?region=eu' });
  });
});

describe('understandRequest: no server named means ask for one', () => {
  const needs: [string, 'check_trust' | 'preflight'][] = [
    ['trust score for', 'check_trust'],
    ['trust score for ', 'check_trust'],
    ['trust score for?', 'check_trust'],
    ['Trust score for...', 'check_trust'],
    ['trust score', 'check_trust'],
    ['trust score?', 'check_trust'],
    ['trust score for please', 'check_trust'],
    ['trust score for, please!', 'check_trust'],
    ['trust score for <server>', 'check_trust'],
    ['trust score for <url>', 'check_trust'],
    ['trust score for {server}', 'check_trust'],
    ['trust score for [server]', 'check_trust'],
    ['trust score for ""', 'check_trust'],
    ['trust score for it', 'check_trust'],
    ['trust score for this one', 'check_trust'],
    ['trust score for the server', 'check_trust'],
    ['trust score for my MCP server', 'check_trust'],
    ['what is the trust score?', 'check_trust'],
    ['what is the trust score of the server I used yesterday at work?', 'check_trust'],
    ['can I trust it?', 'check_trust'],
    ['preflight', 'preflight'],
    ['preflight check', 'preflight'],
    ['pre-flight check for', 'preflight'],
    ['preflight <server>', 'preflight'],
    ['please run a preflight check', 'preflight'],
    ['should I call it?', 'preflight'],
  ];
  for (const [text, skill] of needs) {
    it(JSON.stringify(text), () => {
      expect(understandRequest(text)).toEqual({ kind: 'needs_server', skill });
    });
  }
});

describe('understandRequest: other text is not a request for either skill', () => {
  for (const text of ['what is the weather', 'hello', '', '   ', 'trustworthy?', 'entrust me with this', 'list all servers', 'https://weather.example.com/mcp']) {
    it(JSON.stringify(text), () => {
      expect(understandRequest(text)).toEqual({ kind: 'unknown' });
    });
  }
});

describe('understandFollowUp: the answer to "which server?"', () => {
  const cases: [string, string][] = [
    [URL, URL],
    [`${URL}.`, URL],
    [`it's ${URL}`, URL],
    [`It is ${URL}, thanks`, URL],
    [`the server is <${URL}>`, URL],
    [`use ${URL} please`, URL],
    [`[weather](${URL})`, URL],
    ['"weather.example.com/mcp"', 'weather.example.com/mcp'],
    ['io.github.acme/weather', 'io.github.acme/weather'],
    ['Acme Weather', 'Acme Weather'],
  ];
  for (const [text, server] of cases) {
    it(JSON.stringify(text), () => {
      expect(understandFollowUp(text, 'check_trust')).toEqual({ kind: 'ask', skill: 'check_trust', server });
    });
  }

  it('a whole request in the answer wins, with its own skill', () => {
    expect(understandFollowUp(`preflight ${URL}`, 'check_trust')).toEqual({ kind: 'ask', skill: 'preflight', server: URL });
  });

  it('an answer naming no server asks again', () => {
    for (const text of ['', 'please', 'it', 'the server', '<server>', 'I do not know which one to choose, any of them really']) {
      expect(understandFollowUp(text, 'preflight'), text).toEqual({ kind: 'needs_server', skill: 'preflight' });
    }
  });
});

describe('extractServer', () => {
  it('refuses control characters and over-long text', () => {
    expect(extractServer('weather.example.com/mcp\u0000')).toBeNull();
    expect(extractServer(`https://x.example.com/${'a'.repeat(5000)}`)).toBeNull();
  });
});

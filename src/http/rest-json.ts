import type { DescMessage } from '@bufbuild/protobuf';
import { messageJson } from '../domain/message-json.js';

// REST bodies are the message JSON of domain/message-json.ts (one converter for every adapter
// and for the services that sign documents); this module adds the per-response text cache.
export { messageJson as restJson } from '../domain/message-json.js';

const texts = new WeakMap<object, string>();

/**
 * The REST JSON body as text, serialised once per response object: services that hand out the
 * same (cached, never mutated) response for repeated reads skip conversion and JSON.stringify.
 */
export function restJsonText(desc: DescMessage, msg: object): string {
  let text = texts.get(msg);
  if (text === undefined) {
    text = JSON.stringify(messageJson(desc, msg));
    texts.set(msg, text);
  }
  return text;
}

// Text the command line prints often came from someone else: an MCP server's error message, a
// token's key id, a registry page, a bundle's contents. On a terminal, control characters in it
// are commands: ESC sequences clear or rewrite lines ("invalid" overwritten by "valid: true"),
// OSC 52 writes the clipboard, OSC 8 plants links, CR and backspace overwrite what was printed,
// and the bidirectional overrides reorder what the eye reads. Every line the command line writes
// passes through terminalText, which shows such characters as \uXXXX instead of sending them.
// JSON output stays JSON that means the same: the escape is JSON's own spelling of the character,
// and such characters only occur inside string literals there.

// C0 controls except tab and newline, DEL, C1 controls (U+009B is a one-character CSI), the
// Arabic letter mark, the bidirectional marks, embeddings, overrides and isolates, and the line
// and paragraph separators some terminals and editors break lines at.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

function escapeOne(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
}

/** The line with every terminal control character written out as a \uXXXX escape. */
export function terminalText(line: string): string {
  UNSAFE.lastIndex = 0;
  return UNSAFE.test(line) ? line.replace(UNSAFE, escapeOne) : line;
}

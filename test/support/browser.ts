import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

// Debian's Chromium through playwright-core for the page tests: one launch for all of them.

export const CHROMIUM = '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);

/** Prints the one skip line of a browser test file when Chromium is absent. */
export function reportChromium(file: string): void {
  if (!haveChromium) console.log(`${file}: SKIPPED, ${CHROMIUM} is not installed (apt-get install chromium)`);
}

/** A headless Chromium with its own profile directory, JavaScript off (the pages need none); `close` removes the profile. */
export async function launchChromium(): Promise<{ ctx: BrowserContext; close(): Promise<void> }> {
  const userDataDir = mkdtempSync(path.join(tmpdir(), 'obs-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    viewport: { width: 1280, height: 900 },
    javaScriptEnabled: false,
  });
  // Playwright's 30 s default waits time out on a loaded machine before anything is wrong.
  ctx.setDefaultTimeout(120_000);
  ctx.setDefaultNavigationTimeout(120_000);
  return {
    ctx,
    async close() {
      await ctx.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

import { expect } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

/** Asserts that `name=value` stops start-up with a ConfigError naming the variable first. */
export function expectConfigRefusal(name: string, value: string): void {
  let err: unknown;
  try {
    loadConfig({ [name]: value });
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as ConfigError).variable).toBe(name);
  expect((err as Error).message.startsWith(`${name}:`)).toBe(true);
}

import { ObservatoryError } from '../errors.js';
import { ProbeFailed, TargetRefused } from './safe-fetch.js';

/**
 * Maps what the safe client throws to the service's errors: a refused target is the caller's
 * doing (400 target_refused saying why), a target that did not answer is an upstream problem.
 */
export function probeError(err: unknown): unknown {
  if (err instanceof TargetRefused) return new ObservatoryError('target_refused', `target refused: ${err.reason}`, { extra: { target: err.url } });
  if (err instanceof ProbeFailed) {
    if (err.kind === 'timeout') return new ObservatoryError('upstream_timeout', err.message);
    return new ObservatoryError('upstream_error', err.message);
  }
  return err;
}

/**
 * A route's hooks of one kind with `hook` after them, for an onRoute hook that gives only some
 * routes a hook of their own (rate limits, metrics): a hook on just those routes costs the others
 * nothing, where an application-wide hook would run, and decide, on every request.
 */
export function withRouteHook<T>(current: T | T[] | undefined, hook: T): T[] {
  return current === undefined ? [hook] : [...(Array.isArray(current) ? current : [current]), hook];
}

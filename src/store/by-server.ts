/** Groups query rows by server_id, in row order, into the lists a Map<serverId, T[]> holds. */
export function groupByServer<R extends { server_id: number }, T = Omit<R, 'server_id'>>(
  rows: readonly R[],
  value: (rest: Omit<R, 'server_id'>) => T = (rest) => rest as T,
): Map<number, T[]> {
  const out = new Map<number, T[]>();
  for (const { server_id, ...rest } of rows) {
    const list = out.get(server_id);
    if (list) list.push(value(rest));
    else out.set(server_id, [value(rest)]);
  }
  return out;
}

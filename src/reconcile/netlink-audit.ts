// Our tables audited over plain netlink, object by object (docs/writes.md, "Beside a busy node"):
// beside a tool that commits all the time, libnftables' listing of a large table of ours never
// ends (it starts again whenever the namespace's generation id moves), so while nftables'
// notifications are heard, the periodic audit reads what the kernel holds without it — every
// address set's elements compared with the whole list the agent wrote (audit::AuditSet, on a pool
// thread), each chain's hook and the comments of its rules (the mark among them), each rule's
// expressions as they were right after the agent's own write, and the named counters.
import type { TablesPort, OthersPort } from '../kernel/ports.js';
import type { Chain, NamedSet, RuleShape, Table, TableFamily } from '../nftables/types.js';

/** Each chain's rules as their expressions show them, by table family and chain name. */
export type RuleFingerprints = ReadonlyMap<TableFamily, ReadonlyMap<string, readonly string[]>>;

/** One rule's expressions, verdicts and translation, as one string. */
function fingerprint(shape: RuleShape): string {
  return JSON.stringify([
    shape.expressions,
    shape.jumps,
    shape.maps ?? [],
    shape.mapJumps ?? [],
    shape.translates,
    shape.ports ?? null,
  ]);
}

/** What `rule` carries as its comment (`comment "…"` at its end), or "" . */
function commentOf(rule: string): string {
  return /comment "(.*)"$/.exec(rule)?.[1] ?? '';
}

/** The sets audit::AuditSet can compare: sets of address ranges. */
function audited(set: NamedSet): boolean {
  if (set.transient || set.map || set.key.elements === 'names') return false;
  return set.key.elementSuffix !== '' || set.flags.includes('interval');
}

/** The rules of every chain of these tables, as the kernel holds them now (taken after a write). */
export async function ruleFingerprints(
  kernel: TablesPort & OthersPort,
  tables: readonly Table[],
): Promise<RuleFingerprints> {
  const byFamily = new Map<TableFamily, Map<string, string[]>>();
  for (const table of tables) {
    const chains = new Map<string, string[]>();
    for (const chain of table.chains) {
      const shapes = await kernel.ruleShapes(table.family, table.name, chain.name);
      chains.set(chain.name, shapes.map(fingerprint));
    }
    byFamily.set(table.family, chains);
  }
  return byFamily;
}

const same = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * Where the kernel's tables differ from `tables` (as this process last wrote them), as sentences;
 * none when they agree. `rules`: each chain's rules as they were right after that write.
 */
export async function auditTables(
  kernel: TablesPort & OthersPort,
  tables: readonly Table[],
  rules: RuleFingerprints | undefined,
): Promise<string[]> {
  const differences: string[] = [];
  const chainsHeld = await kernel.chains();
  for (const table of tables) {
    const ref = { family: table.family, name: table.name };
    const where = `table ${table.family} ${table.name}`;
    const held = chainsHeld.filter((c) => c.family === table.family && c.table === table.name);
    const names = (list: ReadonlyArray<{ name: string }>) => list.map((c) => c.name).sort();
    if (!same(names(held), names(table.chains))) {
      differences.push(
        `${where}: chains ${names(held).join(', ') || '(none)'}, written ${names(table.chains).join(', ')}`,
      );
      continue;
    }
    for (const chain of table.chains)
      differences.push(...(await auditChain(kernel, ref, chain, held, rules)));
    const counters = (await kernel.counters(ref)).map((c) => c.name).sort();
    const written = [...(table.counters ?? [])].sort();
    if (!same(counters, written))
      differences.push(`${where}: counters ${counters.join(', ')}, written ${written.join(', ')}`);
    for (const set of table.sets.filter(audited)) {
      const found = await kernel.auditSet(ref, set, set.elements);
      if (found.missingCount > 0 || found.extraCount > 0)
        differences.push(
          `${where} set ${set.name}: ${found.missingCount} missing, ${found.extraCount} not written`,
        );
    }
  }
  return differences;

  async function auditChain(
    kernel: TablesPort & OthersPort,
    ref: { family: TableFamily; name: string },
    chain: Chain,
    held: ReadonlyArray<{ name: string; hook?: { name: string } }>,
    fingerprints: RuleFingerprints | undefined,
  ): Promise<string[]> {
    const where = `chain ${ref.family} ${ref.name} ${chain.name}`;
    const found = held.find((c) => c.name === chain.name);
    if ((found?.hook?.name ?? null) !== (chain.base?.hook ?? null))
      return [
        `${where}: hook ${found?.hook?.name ?? 'none'}, written ${chain.base?.hook ?? 'none'}`,
      ];
    const comments = await kernel.ruleComments(ref, chain.name);
    if (!same(comments, chain.rules.map(commentOf)))
      return [
        `${where}: ${comments.length} rules (comments ${JSON.stringify(comments)}), written ${chain.rules.length}`,
      ];
    const after = fingerprints?.get(ref.family)?.get(chain.name);
    if (after === undefined) return [];
    const now = (await kernel.ruleShapes(ref.family, ref.name, chain.name)).map(fingerprint);
    return same(now, after) ? [] : [`${where}: its rules' expressions changed since written`];
  }
}

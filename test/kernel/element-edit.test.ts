// Element-only edits over netlink (src/nftables/change.ts elementEdit, the addon's editElements)
// write the very objects libnftables writes for the same change: random edits of concatenated sets
// and of plain interval sets (start and end elements; ranges up to the last address and ranges that
// adjoin among them), both families, each applied in one namespace by nft's script and in another by the netlink
// batch, the two tables listed by every nft version here (1.0.6 and 1.1.x) and compared. A batch
// pinned to a generation id another commit moved past, one whose marked rule is not there, and one
// deleting an element that is not there are refused whole: the table stays as it was. The audit of
// such a write (the addon's auditSet and ruleComments, over netlink) reads back after each random
// edit exactly what the edit made, and names the elements another commit added or deleted. A list
// replaced wholesale refills a plain interval set in the same batch (its flush, libnftables' marker
// element and every range), compared item for item as the kernel lists them.
import fc from 'fast-check';
import t from 'tap';
import { compile, type CompileOptions } from '../../src/compile.js';
import { parseConfigText } from '../../src/config/index.js';
import { elementEdit, renderElementEdit } from '../../src/nftables/change.js';
import { listingIs } from '../../src/nftables/listing.js';
import { renderTable } from '../../src/nftables/render.js';
import type {
  ElementEdit,
  NamedSet,
  SetAudit,
  Table,
  TableElementEdit,
} from '../../src/nftables/types.js';
import { requireRoot } from '../../harness/netns.js';
import { ourListings, ourSetItems, versionsHere } from '../helpers/nft-versions.js';
import { startAddon } from './fixtures/addon-client.js';
import { compileOptions } from '../helpers/compile-options.js';

const OPTIONS = compileOptions({ enableIPv6: true, setLayout: 'concat' });
const LAYOUTS = ['concat', 'interval'] as const;

/** /16 to /28 prefixes near each other (they nest, adjoin and merge), and a few IPv6 ones. */
const v4 = fc
  .tuple(fc.integer({ min: 0, max: 1023 }), fc.integer({ min: 16, max: 28 }))
  .map(([n, len]) => {
    const addr = ((10 << 24) | (n << 8) | ((n * 16) & 255)) >>> 0;
    const a = (addr & ((0xffffffff << (32 - len)) >>> 0)) >>> 0;
    return `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}/${len}`;
  });
const v6 = fc.integer({ min: 0, max: 255 }).map((n) => `fd00:${n.toString(16)}::/48`);
/** Ranges at the ends of the address space: up to the last address, and from the first. */
const edges = fc.constantFrom('240.0.0.0/4', '0.0.0.0/8', 'ff00::/8', '255.255.255.255/32');
/** /24s that never merge (every fourth one), for lists replaced wholesale. */
const apart = fc
  .integer({ min: 0, max: 255 })
  .map((n) => `10.${100 + (n >> 6)}.${(n & 63) * 4}.0/24`);
const cidr = fc.oneof(
  { weight: 10, arbitrary: v4 },
  { weight: 2, arbitrary: v6 },
  { weight: 1, arbitrary: edges },
);

function tables(
  nonMasq: readonly string[],
  masq: readonly string[],
  generation: number,
  setLayout: CompileOptions['setLayout'] = 'concat',
): Table[] {
  const text = `nonMasqueradeCIDRs: [${nonMasq.join(', ')}]\nmasqueradeCIDRs: [${masq.join(', ')}]\ncidrLimit: 200000\n`;
  const result = parseConfigText(text, 'case', {
    enableIPv6: true,
    nomasqAllReservedRanges: false,
  });
  if (!result.ok) throw result.error;
  return compile(result.config, { ...OPTIONS, setLayout }, generation, 'minx3e9s.001');
}

function editOf(before: Table[], after: Table[]): TableElementEdit[] | undefined {
  const edits: TableElementEdit[] = [];
  for (const [i, table] of after.entries()) {
    const edit = elementEdit(table, before[i]!);
    if (!edit) return undefined;
    edits.push(edit);
  }
  return edits;
}

/** The sets the element-write audit reads: address ranges, the config's (not the late replies'), not empty. */
function auditable(table: Table): NamedSet[] {
  return table.sets.filter(
    (set) =>
      !set.transient &&
      set.key.elements !== 'names' &&
      (set.key.elementSuffix !== '' || set.flags.includes('interval')) &&
      set.elements.length > 0,
  );
}

if (requireRoot(t)) {
  // Random edits and wholesale replacements listed by two nft versions, and a 100 000-range
  // refill: about 25 s here, more on a busy machine.
  t.setTimeout(600_000);
  const tools = versionsHere(t);
  const viaNft = await startAddon(t);
  const viaNetlink = await startAddon(t);
  const clear =
    'add table ip ipmasq\ndelete table ip ipmasq\nadd table ip6 ipmasq\ndelete table ip6 ipmasq\n';
  const listings = (ns: string) => ourListings(ns, tools);

  const rawItems = (ns: string) => ourSetItems(ns, tools[0]!);

  /**
   * `before` written whole in both namespaces, then the change to `after` as nft's script in one
   * and as the netlink batch in the other: the same tables, item for item, and the audit of the
   * write reads back exactly what it made. The edits, for the caller to look at.
   */
  const bothWays = async (before: Table[], after: Table[]): Promise<TableElementEdit[]> => {
    const edits = editOf(before, after);
    if (!edits) throw new Error('a change of the lists only is an element edit');
    const whole = before.map((table) => renderTable(table)).join('');
    for (const addon of [viaNft, viaNetlink])
      await addon.value({ op: 'run', script: clear + whole });
    await viaNft.value({ op: 'run', script: renderElementEdit(edits) });
    const generation = await viaNetlink.value<number>({ op: 'generation' });
    const edit: ElementEdit = { tables: edits, generation };
    await viaNetlink.value({ op: 'edit', edit });
    const [a, b] = [await listings(viaNft.ns), await listings(viaNetlink.ns)];
    if (a.join('\n') !== b.join('\n'))
      throw new Error(`nft wrote\n${a.join('\n')}\nnetlink wrote\n${b.join('\n')}`);
    const [rawA, rawB] = [await rawItems(viaNft.ns), await rawItems(viaNetlink.ns)];
    if (rawA !== rawB) throw new Error(`nft wrote the items\n${rawA}\nnetlink wrote\n${rawB}`);
    for (const [i, table] of after.entries()) {
      if (!listingIs(b[i]!, table)) throw new Error(`not the new table:\n${b[i]}`);
    }
    // The audit of that write reads each set back over netlink: nothing differs from the
    // new list, and from the old one exactly the elements the edit changed.
    for (const [i, table] of after.entries()) {
      const ref = { family: table.family, name: table.name };
      for (const set of auditable(table)) {
        const was = before[i]!.sets.find((s) => s.name === set.name)!.elements;
        const now = await viaNetlink.value<SetAudit>({
          op: 'audit',
          ref,
          set,
          elements: set.elements,
        });
        if (now.missingCount + now.extraCount !== 0 || now.held !== set.elements.length)
          throw new Error(`${set.name}: the audit differs after the write: ${JSON.stringify(now)}`);
        const then = await viaNetlink.value<SetAudit>({
          op: 'audit',
          ref,
          set,
          elements: was,
        });
        const gone = was.filter((e) => !set.elements.includes(e)).length;
        const come = set.elements.filter((e) => !was.includes(e)).length;
        if (then.missingCount !== gone || then.extraCount !== come)
          throw new Error(
            `${set.name}: against the old list the audit finds ${then.missingCount} missing and ${then.extraCount} not meant, the edit changed ${gone} and ${come}`,
          );
      }
      const comments = await viaNetlink.value<string[]>({
        op: 'comments',
        ref,
        chain: edits[i]!.chain,
      });
      if (!comments.includes(edits[i]!.mark))
        throw new Error(`the new mark is not read back: ${JSON.stringify(comments)}`);
    }
    return edits;
  };

  for (const layout of LAYOUTS)
    t.test(
      `${layout} sets: the netlink batch writes what nft writes, listed by every nft here`,
      async (t) => {
        let compared = 0;
        await fc.assert(
          fc.asyncProperty(
            fc.uniqueArray(cidr, { minLength: 1, maxLength: 40 }),
            fc.uniqueArray(cidr, { maxLength: 3 }),
            fc.uniqueArray(cidr, { maxLength: 4 }),
            fc.nat(),
            async (base, masq, added, drop) => {
              // Each family's sets never empty: an interval set emptied or filled goes by libnftables.
              const always = ['fd00:ffff::/48', '10.255.0.0/16'];
              const kept = base.filter((_, i) => drop % (base.length + 1) !== i);
              const next = [...new Set([...always, ...kept, ...added])];
              const masqAlways = [...new Set(['10.254.0.0/16', 'fd00:fffe::/48', ...masq])];
              const before = tables([...new Set([...always, ...base])], masqAlways, 1, layout);
              const after = tables(next, masqAlways, 2, layout);
              await bothWays(before, after);
              compared++;
            },
          ),
          { numRuns: 40 },
        );
        t.equal(
          compared,
          40,
          `40 random edits, listed by nft ${tools.map((x) => x.version).join(' and ')}`,
        );
      },
    );

  t.test(
    'interval sets changed wholesale: flushed and refilled in one batch, as nft writes it',
    async (t) => {
      let refilled = 0;
      let compared = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.tuple(
            fc.uniqueArray(apart, { minLength: 12, maxLength: 40 }),
            fc.uniqueArray(cidr, { maxLength: 8 }),
          ),
          fc.tuple(
            fc.uniqueArray(apart, { minLength: 12, maxLength: 40 }),
            fc.uniqueArray(cidr, { maxLength: 8 }),
          ),
          fc.uniqueArray(cidr, { maxLength: 3 }),
          async ([baseApart, baseMore], [freshApart, freshMore], masq) => {
            const base = [...baseApart, ...baseMore];
            const fresh = [...freshApart, ...freshMore];
            const always = ['fd00:ffff::/48', '10.255.0.0/16'];
            const masqAlways = [...new Set(['10.254.0.0/16', 'fd00:fffe::/48', ...masq])];
            const before = tables([...new Set([...always, ...base])], masqAlways, 1, 'interval');
            const after = tables([...new Set([...always, ...fresh])], masqAlways, 2, 'interval');
            const edits = await bothWays(before, after);
            if (edits.some((edit) => edit.sets.some((set) => set.refill))) refilled++;
            compared++;
          },
        ),
        { numRuns: 25 },
      );
      t.equal(compared, 25, '25 random lists replaced by others, both families');
      t.ok(refilled >= 15, `most of them refilled (${refilled}), the rest element deltas`);
    },
  );

  t.test(
    '100 000 ranges refilled in one batch: its hundreds of acknowledgements read',
    async (t) => {
      // Every other /24 of 10.0.0.0/8 and 11.0.0.0/8, then the ones between: nothing kept.
      const list = (odd: number) =>
        Array.from({ length: 100_000 }, (_, i) => {
          const n = 2 * i + odd;
          return `${10 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`;
        });
      const [before] = tables(list(0), [], 1, 'interval');
      const [after] = tables(list(1), [], 2, 'interval');
      const edit = elementEdit(after!, before!);
      if (!edit) return t.fail('an element edit');
      t.ok(
        edit.sets.some((set) => set.refill && set.added.length > 100_000),
        'a refill of the set',
      );
      await viaNetlink.value({ op: 'run', script: clear + renderTable(before!) });
      await viaNetlink.value({ op: 'edit', edit: { tables: [edit] } });
      const set = after!.sets.find((s) => s.name === 'nonmasq')!;
      const found = await viaNetlink.value<SetAudit>({
        op: 'audit',
        ref: { family: 'ip', name: 'ipmasq' },
        set,
        elements: set.elements,
      });
      t.same(
        [found.missingCount, found.extraCount, found.held],
        [0, 0, set.elements.length],
        'the kernel holds the new list, read back whole',
      );
    },
  );

  t.test('refused whole: a moved generation, a missing mark, a missing element', async (t) => {
    const base = ['10.0.0.0/24', '10.0.2.0/24', 'fd00:1::/48'];
    const before = tables(base, [], 1);
    const after = tables(['10.0.0.0/24', '10.0.4.0/24', 'fd00:2::/48'], [], 2);
    const edits = editOf(before, after)!;
    t.ok(
      edits.every((edit) => edit.sets.length > 0),
      'elements added and deleted in each family',
    );
    const fresh = async () => {
      await viaNetlink.value({
        op: 'run',
        script: clear + before.map((table) => renderTable(table)).join(''),
      });
      return listings(viaNetlink.ns);
    };
    const refused = async (edit: ElementEdit, why: RegExp, what: string) => {
      const held = await fresh();
      const outcome = await viaNetlink.request({ op: 'edit', edit });
      t.notOk(outcome.ok, `${what}: refused`);
      if (!outcome.ok) t.match(outcome.error.message, why, `${what}: says why`);
      t.same(await listings(viaNetlink.ns), held, `${what}: the tables as they were`);
    };
    await fresh();
    const generation = await viaNetlink.value<number>({ op: 'generation' });
    // Another commit (any: here a table of another tool) after the generation read.
    await viaNetlink.value({ op: 'run', script: 'add table ip other\ndelete table ip other\n' });
    const outcome = await viaNetlink.request({ op: 'edit', edit: { tables: edits, generation } });
    t.notOk(outcome.ok, 'a generation moved past: refused');
    if (!outcome.ok) t.match(outcome.error.message, /another commit came since/);
    await refused(
      {
        tables: edits.map((edit) => ({
          ...edit,
          wasMark: 'ipmasq-agent generation 9 config sha256:00',
        })),
      },
      /no rule carries the mark of the last write/,
      'a mark that is not there',
    );
    const missing = edits.map((edit) => ({
      ...edit,
      sets: edit.sets.map((set) => ({ ...set, removed: Object.freeze(['10.0.8.0/24']) as never })),
    }));
    await refused(
      { tables: missing.slice(0, 1) },
      /No such file or directory/,
      'an element that is not there',
    );
    // And the same edit, unpinned, goes through.
    await fresh();
    await viaNetlink.value({ op: 'edit', edit: { tables: edits } });
    const now = await listings(viaNetlink.ns);
    t.ok(listingIs(now[0]!, after[0]!) && listingIs(now[1]!, after[1]!), 'then the edit applies');
  });

  for (const layout of LAYOUTS)
    t.test(`${layout} sets: the audit names what another commit changed`, async (t) => {
      // Adjoining prefixes (10.0.0.0/23 and 10.0.2.0/24) and a range up to the last address.
      const base = ['10.0.0.0/23', '10.0.2.0/24', '10.0.8.0/24', '240.0.0.0/4', 'fd00:1::/48'];
      const [ip, ip6] = tables(base, [], 1, layout);
      await viaNetlink.value({
        op: 'run',
        script: clear + renderTable(ip!) + renderTable(ip6!),
      });
      const set = auditable(ip!).find((s) => s.elements.includes('10.0.8.0/24'))!;
      const set6 = auditable(ip6!).find((s) => s.elements.includes('fd00:1::/48'))!;
      const audit = (table: Table, s: NamedSet) =>
        viaNetlink.value<SetAudit>({
          op: 'audit',
          ref: { family: table.family, name: table.name },
          set: s,
          elements: s.elements,
        });
      const agrees = await audit(ip!, set);
      t.same(
        [agrees.missingCount, agrees.extraCount, agrees.held],
        [0, 0, set.elements.length],
        'as written: nothing differs (adjoining ranges and one up to the last address)',
      );
      const suffix = layout === 'concat' ? ' . 0-255' : '';
      await viaNetlink.value({
        op: 'run',
        script:
          `add element ip ipmasq ${set.name} { 198.51.100.0/24${suffix} }\n` +
          `delete element ip ipmasq ${set.name} { 10.0.8.0/24${suffix} }\n` +
          `add element ip6 ipmasq ${set6.name} { fd00:9::/64${suffix} }\n`,
      });
      const found = await audit(ip!, set);
      t.same(
        { missing: found.missing, extra: found.extra },
        { missing: ['10.0.8.0-10.0.8.255'], extra: ['198.51.100.0-198.51.100.255'] },
        'an element deleted and one added by another commit: each named',
      );
      const found6 = await audit(ip6!, set6);
      t.same(found6.extra, ['fd00:9::-fd00:9::ffff:ffff:ffff:ffff'], 'IPv6 too');
      const outcome = await viaNetlink.request({
        op: 'audit',
        ref: { family: 'ip', name: 'ipmasq' },
        set,
        elements: ['10.0.0.0/24', 'not-an-address'],
      });
      t.notOk(outcome.ok, 'a list that does not parse is an error, not a difference');
    });
}

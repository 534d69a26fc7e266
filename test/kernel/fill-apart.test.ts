// A change made on new sets with its large sets filled over netlink (src/nftables/change.ts,
// renderKeyChangeApart; the addon's fillSets) leaves the kernel holding what the same change all
// through libnftables (renderKeyChange) leaves: random lists of a few thousand ranges, both
// families, the layout switched from interval to concatenated and a concatenated set changed
// wholesale, applied in one namespace each way and listed by every nft version here, item for
// item. After each step the sets a rule refers to are full (no packet meets a set part filled),
// and the element-write audit reads back exactly the list the write meant. A fill into a set
// another commit deleted is refused whole.
import fc from 'fast-check';
import t from 'tap';
import { compile, type CompileOptions } from '../../src/compile.js';
import { parseConfigText } from '../../src/config/index.js';
import {
  FILL_APART_MIN,
  nextSetName,
  renderKeyChange,
  renderKeyChangeApart,
} from '../../src/nftables/change.js';
import { listingIs } from '../../src/nftables/listing.js';
import { renderTable } from '../../src/nftables/render.js';
import type { SetAudit, SetFill, Table } from '../../src/nftables/types.js';
import { requireRoot } from '../../harness/netns.js';
import { ourListings, ourSetItems, runNftTool, versionsHere } from '../helpers/nft-versions.js';
import { compileOptions } from '../helpers/compile-options.js';
import { startAddon } from './fixtures/addon-client.js';

const OPTIONS = compileOptions({ enableIPv6: true, setLayout: 'concat' });

function tables(
  nonMasq: readonly string[],
  generation: number,
  setLayout: CompileOptions['setLayout'],
): Table[] {
  const text = `nonMasqueradeCIDRs: [${nonMasq.join(', ')}]\nmasqueradeCIDRs: [10.254.0.0/16, fd00:fffe::/48]\ncidrLimit: 200000\n`;
  const result = parseConfigText(text, 'case', {
    enableIPv6: true,
    nomasqAllReservedRanges: false,
  });
  if (!result.ok) throw result.error;
  return compile(result.config, { ...OPTIONS, setLayout }, generation, 'minx3e9s.001');
}

/** `count` /24s apart from each other from the `start`th on (every other one: none merge). */
function spaced(count: number, start: number): string[] {
  return Array.from({ length: count }, (_, i) => {
    const n = 2 * (start + i);
    return `${10 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`;
  });
}

/** /48s of fd00::/8, `count` from the `start`th on. */
function spaced6(count: number, start: number): string[] {
  return Array.from(
    { length: count },
    (_, i) =>
      `fd${((start + i) >> 16).toString(16).padStart(2, '0')}:${((start + i) & 0xffff).toString(16)}::/48`,
  );
}

if (requireRoot(t)) {
  t.setTimeout(900_000);
  const tools = versionsHere(t);
  const viaNft = await startAddon(t);
  const viaNetlink = await startAddon(t);
  const clear =
    'add table ip ipmasq\ndelete table ip ipmasq\nadd table ip6 ipmasq\ndelete table ip6 ipmasq\n';
  const listings = (ns: string) => ourListings(ns, tools);
  const rawItems = (ns: string) => ourSetItems(ns, tools[0]!);
  /** The sets the rules of our tables refer to, with their element counts, as the host's nft lists them. */
  const referred = async (ns: string) => {
    const out: Array<{ set: string; held: number }> = [];
    for (const family of ['ip', 'ip6']) {
      const { stdout } = await runNftTool(ns, tools[0]!, ['-j', 'list', 'table', family, 'ipmasq']);
      const items = (JSON.parse(stdout) as { nftables: Array<Record<string, unknown>> }).nftables;
      const named = new Map<string, number>();
      for (const item of items) {
        const set = item.set as { name: string; elem?: unknown[] } | undefined;
        if (set) named.set(set.name, set.elem?.length ?? 0);
      }
      for (const item of items) {
        if (!item.rule) continue;
        for (const [, name] of JSON.stringify(item.rule).matchAll(/"@([\w-]+)"/g))
          out.push({ set: `${family} ${name}`, held: named.get(name!) ?? -1 });
      }
    }
    return out;
  };

  /**
   * `before` written whole in both namespaces, then the change to `after`: all through libnftables
   * in one, with its large sets filled over netlink in the other. Returns how many fills it took.
   */
  const bothWays = async (before: Table[], after: Table[], sizes: Map<string, number>) => {
    const whole = before.map((table) => renderTable(table)).join('');
    for (const addon of [viaNft, viaNetlink])
      await addon.value({ op: 'run', script: clear + whole });
    let fills = 0;
    for (const [i, table] of after.entries()) {
      const present = new Set(before[i]!.sets.map((set) => set.name));
      for (const script of renderKeyChange(table, present))
        await viaNft.value({ op: 'run', script });
      for (const step of renderKeyChangeApart(table, present)) {
        if (typeof step === 'string') await viaNetlink.value({ op: 'run', script: step });
        else {
          await viaNetlink.value({ op: 'fill', fill: step });
          fills++;
        }
        // Every set a rule refers to holds its whole list after every step.
        for (const { set, held } of await referred(viaNetlink.ns)) {
          const want = sizes.get(set.replace(/-next$/, ''));
          if (want !== undefined && held !== want && held !== sizes.get(`was ${set}`))
            throw new Error(`after a step a rule refers to ${set} holding ${held} items`);
        }
      }
    }
    const [a, b] = [await listings(viaNft.ns), await listings(viaNetlink.ns)];
    if (a.join('\n') !== b.join('\n'))
      throw new Error(
        `libnftables wrote\n${a.join('\n').slice(0, 4000)}\nfilled apart\n${b.join('\n').slice(0, 4000)}`,
      );
    const [rawA, rawB] = [await rawItems(viaNft.ns), await rawItems(viaNetlink.ns)];
    if (rawA !== rawB) throw new Error('the set items differ item for item');
    for (const [i, table] of after.entries())
      if (!listingIs(b[i]!, table)) throw new Error(`not the new table:\n${b[i]!.slice(0, 4000)}`);
    // The element-write audit of the filled sets: exactly the list the write meant.
    for (const table of after)
      for (const set of table.sets.filter((s) => s.elements.length >= FILL_APART_MIN)) {
        const found = await viaNetlink.value<SetAudit>({
          op: 'audit',
          ref: { family: table.family, name: table.name },
          set,
          elements: set.elements,
        });
        if (found.missingCount + found.extraCount !== 0 || found.held !== set.elements.length)
          throw new Error(`${set.name}: the audit differs: ${JSON.stringify(found)}`);
      }
    return fills;
  };

  /** The item count each set is listed with by `nft -j` (an interval set's ranges, a concatenated one's elements). */
  const itemCounts = async (ns: string, into: Map<string, number>, prefix = '') => {
    for (const family of ['ip', 'ip6']) {
      const { stdout } = await runNftTool(ns, tools[0]!, ['-j', 'list', 'table', family, 'ipmasq']);
      for (const item of (JSON.parse(stdout) as { nftables: Array<Record<string, unknown>> })
        .nftables) {
        const set = item.set as { name: string; elem?: unknown[] } | undefined;
        if (set) into.set(`${prefix}${family} ${set.name}`, set.elem?.length ?? 0);
      }
    }
  };

  for (const from of ['interval', 'concat'] as const)
    t.test(`from the ${from} layout: the fills write what libnftables writes`, async (t) => {
      let compared = 0;
      let filled = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: FILL_APART_MIN, max: FILL_APART_MIN + 1500 }),
          fc.integer({ min: 0, max: 20_000 }),
          fc.integer({ min: 0, max: 200 }),
          fc.integer({ min: 0, max: FILL_APART_MIN + 500 }),
          async (count, start, count6, startNext) => {
            const before = tables([...spaced(count, start), ...spaced6(count6, 7)], 1, from);
            // Wholesale: every range other than before's (odd /24s where before had even ones).
            const next = [...spaced(count, start + 30_000 + startNext), ...spaced6(count6 + 1, 9)];
            const after = tables(next, 2, 'concat');
            // The sets' sizes when whole, as the kernel lists them, from a namespace written whole.
            const sizes = new Map<string, number>();
            await viaNft.value({
              op: 'run',
              script: clear + after.map((x) => renderTable(x)).join(''),
            });
            await itemCounts(viaNft.ns, sizes);
            await viaNft.value({
              op: 'run',
              script: clear + before.map((x) => renderTable(x)).join(''),
            });
            await itemCounts(viaNft.ns, sizes, 'was ');
            filled += await bothWays(before, after, sizes);
            compared++;
          },
        ),
        { numRuns: 6 },
      );
      t.equal(
        compared,
        6,
        `6 random changes, listed by nft ${tools.map((x) => x.version).join(' and ')}`,
      );
      t.ok(filled >= 12, `each filled its large set over netlink twice (${filled} fills)`);
    });

  t.test('a fill into a set another commit deleted is refused whole', async (t) => {
    const [table] = tables(spaced(FILL_APART_MIN, 0), 1, 'concat');
    const set = table!.sets.find((s) => s.elements.length >= FILL_APART_MIN)!;
    const empty = renderTable({
      ...table!,
      sets: table!.sets.map((s) => (s === set ? { ...s, elements: [] as never } : s)),
    });
    await viaNetlink.value({ op: 'run', script: clear + empty });
    const temporary = { ...set, name: nextSetName(set.name) };
    const fill: SetFill = {
      tables: [{ family: 'ip', table: 'ipmasq', sets: [set, temporary] }],
    };
    await t.rejects(viaNetlink.value({ op: 'fill', fill }), 'refused: one set is not there');
    const found = await viaNetlink.value<SetAudit>({
      op: 'audit',
      ref: { family: 'ip', name: 'ipmasq' },
      set,
      elements: set.elements,
    });
    t.equal(found.held, 0, 'nothing of the batch was written');
    await viaNetlink.value({
      op: 'fill',
      fill: { tables: [{ family: 'ip', table: 'ipmasq', sets: [set] }] },
    });
    const now = await viaNetlink.value<SetAudit>({
      op: 'audit',
      ref: { family: 'ip', name: 'ipmasq' },
      set,
      elements: set.elements,
    });
    t.same(
      [now.held, now.missingCount, now.extraCount],
      [set.elements.length, 0, 0],
      'filled whole',
    );
  });
}

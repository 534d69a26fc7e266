// The look at other tables' NAT (src/nftables/nat-chains.ts) prints with libnftables once per table
// for all the chains its base chains reach, and not at all while their rules are unchanged: four
// nat postrouting base chains sharing one jumped chain (the red team's case, issue 51) cost one
// print, then none; a changed rule, one more. Each base chain still gets the rules it reaches.
import t from 'tap';
import type { Kernel } from '../../src/nftables/kernel.js';
import { scanNatChains, type ListingCache } from '../../src/nftables/nat-chains.js';
import type { ChainInfo, RuleShape } from '../../src/nftables/types.js';

function fakeKernel() {
  const chains: ChainInfo[] = ['a', 'b', 'c', 'd'].map((name, i) => ({
    family: 'ip',
    table: 'mesh',
    name,
    hook: { name: 'postrouting', priority: 90 + i, type: 'nat' },
  }));
  chains.push({ family: 'ip', table: 'mesh', name: 'masqit' });
  let masqHandle = 100;
  const shapes = (chain: string): RuleShape[] =>
    chain === 'masqit'
      ? [{ handle: masqHandle, translates: true, jumps: [], expressions: ['masq'] }]
      : [
          {
            handle: chain.charCodeAt(0),
            translates: false,
            jumps: ['masqit'],
            expressions: ['immediate'],
          },
        ];
  const prints: string[][] = [];
  const kernel = {
    chains: async () => chains,
    ruleShapes: async (_family: string, _table: string, chain: string) => shapes(chain),
    listRules: async (wanted: ReadonlyArray<{ chain: string }>) => {
      prints.push(wanted.map((w) => w.chain));
      return wanted
        .map(({ chain }) =>
          shapes(chain)
            .map(
              (s) =>
                `table ip mesh {\n\tchain ${chain} {\n\t\t${chain === 'masqit' ? 'masquerade' : 'jump masqit'} # handle ${s.handle}\n\t}\n}\n`,
            )
            .join(''),
        )
        .join('');
    },
  } as unknown as Kernel;
  return { kernel, prints, change: () => masqHandle++ };
}

t.test('one print per table, none while unchanged, one after a change', async (t) => {
  const { kernel, prints, change } = fakeKernel();
  const cache: ListingCache = new Map();
  const ours = () => false;
  const first = await scanNatChains(kernel, ours, cache);
  t.equal(prints.length, 1, 'four base chains sharing a jumped chain: one print');
  t.same(prints[0], ['a', 'b', 'c', 'd', 'masqit'], 'of every chain they reach');
  t.equal(first.chains.length, 4, 'each base chain found');
  for (const chain of first.chains) {
    t.same(
      [...(chain.rules?.keys() ?? [])].sort(),
      [chain.chain, 'masqit'].sort(),
      `${chain.chain}: its own reach`,
    );
    t.match(chain.rules?.get('masqit')?.[0]?.text, /masquerade/);
  }
  await scanNatChains(kernel, ours, cache);
  t.equal(prints.length, 1, 'unchanged: no print');
  change();
  await scanNatChains(kernel, ours, cache);
  t.equal(prints.length, 2, 'a rule replaced: printed once more');
});

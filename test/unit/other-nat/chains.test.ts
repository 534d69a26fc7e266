// The look at other tables' NAT (src/other-nat/chains.ts) prints with libnftables each chain its
// base chains reach once per distinct content: four nat postrouting base chains sharing one jumped
// chain (the red team's case, issue 51) cost one print, then none; a changed rule, a print of that
// chain alone. Each base chain still gets the rules it reaches. A print waits for the caller (the
// agent's sync under way), and a look reads at most LOOK_CHAINS_MAX chains, LOOK_RULES_MAX rules,
// for LOOK_TIME_MS; while nobody committed (the generation id unchanged) it reads nothing again.
import t from 'tap';
import type { Kernel } from '../../../src/kernel/ports.js';
import {
  LOOK_CHAINS_MAX,
  LOOK_RULES_MAX,
  LOOK_TIME_MS,
  scanNatChains,
  type ListingCache,
} from '../../../src/other-nat/chains.js';
import type { ChainInfo, RuleShape } from '../../../src/nftables/types.js';

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
  const after = await scanNatChains(kernel, ours, cache);
  t.equal(prints.length, 2, 'a rule replaced: printed once more');
  t.same(prints[1], ['masqit'], 'only the chain that changed');
  t.match(
    after.chains[0]?.rules?.get('a')?.[0]?.text,
    /jump masqit/,
    'the unchanged chains from the last print',
  );
});

t.test('prints wait for what the caller says; the chains followed are bounded', async (t) => {
  const { kernel, prints } = fakeKernel();
  const order: string[] = [];
  let release = () => {};
  const gate = new Promise<void>((resolve) => (release = resolve));
  const scan = scanNatChains(kernel, () => false, new Map(), {
    beforePrint: async () => {
      order.push('asked');
      await gate;
    },
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.same([order, prints.length], [['asked'], 0], 'no print before the caller lets it');
  release();
  await scan;
  t.equal(prints.length, 1, 'then printed');

  // A chain jumping to the next, LOOK_CHAINS_MAX + 10 deep.
  const deep = {
    chains: async () => [
      {
        family: 'ip',
        table: 'deep',
        name: 'c0',
        hook: { name: 'postrouting', priority: 90, type: 'nat' },
      },
    ],
    ruleShapes: async (_f: string, _t: string, chain: string) => {
      const n = Number(chain.slice(1));
      return n > LOOK_CHAINS_MAX + 10
        ? []
        : [{ handle: n + 1, translates: false, jumps: [`c${n + 1}`], expressions: ['immediate'] }];
    },
    listRules: async () => '',
  } as unknown as Kernel;
  let dumps = 0;
  const counted = {
    ...deep,
    ruleShapes: (...args: Parameters<Kernel['ruleShapes']>) => {
      dumps++;
      return deep.ruleShapes(...args);
    },
  } as unknown as Kernel;
  const found = await scanNatChains(counted, () => false);
  t.equal(dumps, LOOK_CHAINS_MAX, `${LOOK_CHAINS_MAX} chains read, no more`);
  t.ok(found.truncated, 'and the look says it stopped');
});

t.test('nobody committed since the last look: nothing read again', async (t) => {
  const { kernel, prints, change } = fakeKernel();
  let generation = 7;
  let dumps = 0;
  const counted = {
    ...kernel,
    generationId: async () => generation,
    chains: async () => {
      dumps++;
      return kernel.chains();
    },
  } as unknown as Kernel;
  const cache: ListingCache = new Map();
  const first = await scanNatChains(counted, () => false, cache);
  t.equal(first.generation, 7);
  const again = await scanNatChains(counted, () => false, cache, { last: first });
  t.equal(again, first, 'the same look, as it was');
  t.same([dumps, prints.length], [1, 1], 'no dump, no print');
  change();
  generation = 8;
  const moved = await scanNatChains(counted, () => false, cache, { last: first });
  t.not(moved, first, 'a commit since: read again');
  t.same([dumps, prints.length], [2, 2]);
  const failing = { ...counted, generationId: async () => Promise.reject(new Error('no')) };
  const unknown = await scanNatChains(failing as unknown as Kernel, () => false, cache, {
    last: moved,
  });
  t.not(unknown, moved, 'no generation id: read again');
});

t.test('the rules read and the time spent per look are bounded too', async (t) => {
  const base = {
    family: 'ip',
    table: 'wide',
    name: 'post',
    hook: { name: 'postrouting', priority: 90, type: 'nat' },
  };
  const many = (chain: string) =>
    Array.from({ length: chain === 'post' ? LOOK_RULES_MAX : 1 }, (_, i) => ({
      handle: i + 1,
      translates: false,
      jumps: chain === 'post' && i === 0 ? ['next'] : [],
      expressions: ['immediate'],
    }));
  const read: string[] = [];
  const kernel = {
    chains: async () => [base],
    ruleShapes: async (_f: string, _t: string, chain: string) => {
      read.push(chain);
      return many(chain);
    },
    listRules: async () => '',
  } as unknown as Kernel;
  const byRules = await scanNatChains(kernel, () => false);
  t.same(read, ['post'], `${LOOK_RULES_MAX} rules read: the jumped chain not`);
  t.ok(byRules.truncated);
  // A clock moving LOOK_TIME_MS / 2 per reading: the third chain is past the budget.
  let clock = 0;
  const chainOf = (n: number) => [
    { handle: 1, translates: false, jumps: [`c${n + 1}`], expressions: ['immediate'] },
  ];
  const timed = {
    chains: async () => [{ ...base, name: 'c0' }],
    ruleShapes: async (_f: string, _t: string, chain: string) => chainOf(Number(chain.slice(1))),
    listRules: async () => '',
  } as unknown as Kernel;
  const byTime = await scanNatChains(timed, () => false, new Map(), {
    now: () => (clock += LOOK_TIME_MS / 2) - LOOK_TIME_MS / 2,
  });
  t.ok(byTime.truncated, 'stopped by the time budget');
});

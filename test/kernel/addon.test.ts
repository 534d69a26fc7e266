// The nftables addon against the real kernel. Each test gets a fresh network namespace with the
// addon running in a child process inside it (fixtures/addon-server.ts: the addon's threads cannot
// be moved into a namespace from here); this process drives it, and checks the kernel with `nft`.
import t from 'tap';
import type { Test } from 'tap';
import { compile } from '../../src/compile.js';
import { parseConfigText } from '../../src/config/index.js';
import type { Config } from '../../src/config/types.js';
import { renderTable } from '../../src/nftables/render.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { startAddon } from './fixtures/addon-client.js';
import type { Outcome, TickReport } from './fixtures/addon-server.js';
import { compileOptions } from '../helpers/compile-options.js';

/** The kernel's view, read with the nft binary rather than the addon under test. */
async function nftCli(ns: string, ...args: string[]): Promise<string> {
  return (await inNetns(ns, 'nft', args)).stdout;
}

type NftJsonElement =
  string | { prefix: { addr: string; len: number } } | { range: [string, string] };
interface NftJsonSet {
  set?: { name: string; table: string; elem?: NftJsonElement[] };
}

function setElementsFromJson(json: string): string[] {
  const items = (JSON.parse(json) as { nftables: NftJsonSet[] }).nftables;
  const set = items.find((item) => item.set)?.set;
  if (!set) throw new Error(`no set in ${json.slice(0, 200)}`);
  return (set.elem ?? []).map((e) =>
    typeof e === 'string'
      ? e
      : 'prefix' in e
        ? `${e.prefix.addr}/${e.prefix.len}`
        : e.range.join('-'),
  );
}

function setElementsFromText(text: string): string[] {
  const body = /elements = \{([^}]*)\}/.exec(text)?.[1] ?? '';
  return body.split(/[\s,]+/).filter(Boolean);
}

const intervalElements = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '198.51.100.10-198.51.100.20',
  '203.0.113.7',
];
const intervalTable = `table ip kt {
  set s {
    type ipv4_addr
    flags interval
    elements = { ${intervalElements.join(', ')} }
  }
}
`;

t.test('applies a table with an interval set, read back as text and JSON', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  t.equal(await addon.runNft(intervalTable), '', 'applying prints nothing');
  t.same(setElementsFromText(await addon.runNft('list set ip kt s')), intervalElements, 'text');
  t.same(
    setElementsFromJson(await addon.runNft('list set ip kt s', { json: true })),
    intervalElements,
    'JSON',
  );
  t.same(
    setElementsFromText(await nftCli(addon.ns, 'list', 'set', 'ip', 'kt', 's')),
    intervalElements,
    'nft CLI',
  );
});

t.test('a failing script rejects with nft message and leaves the kernel unchanged', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  await addon.runNft(intervalTable);
  const before = await nftCli(addon.ns, 'list', 'ruleset');
  const generation = await addon.generation();

  // The first commands are valid; a later one is not. Nothing of the script may land.
  const syntax = await addon.failure(
    'add element ip kt s { 192.0.2.0/24 }\nadd table ip extra\nadd chain ip extra c {\n',
  );
  t.equal(syntax.name, 'NftError');
  t.match(syntax.message, /syntax error/);
  t.match(syntax.nftMessage, /syntax error/);

  // This one parses, so it reaches the kernel, which rejects the batch.
  const kernel = await addon.failure(
    'add element ip kt s { 192.0.2.0/24 }\nadd table ip extra\ndelete table ip nosuchtable\n',
  );
  t.equal(kernel.name, 'NftError');
  t.match(kernel.nftMessage, /No such file or directory/);
  t.equal(kernel.notFound, true, 'isNotFound()');

  t.equal(await nftCli(addon.ns, 'list', 'ruleset'), before, 'ruleset unchanged');
  t.equal(await addon.generation(), generation, 'nothing committed');
});

t.test('dry-run checks without committing', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  await addon.runNft('table ip keep { set s { type ipv4_addr; elements = { 192.0.2.1 }; }; }');
  const before = await nftCli(addon.ns, 'list', 'ruleset');
  t.equal(await addon.runNft(intervalTable, { dryRun: true }), '', 'an add passes the check');
  t.equal(await addon.runNft('delete table ip keep', { dryRun: true }), '', 'so does a delete');
  t.equal(await nftCli(addon.ns, 'list', 'ruleset'), before, 'neither was committed');
  const syntax = await addon.failure('add table ip kt\nadd chain ip kt c {\n', { dryRun: true });
  t.match(syntax.nftMessage, /syntax error/, 'a bad script still rejects');
  const kernel = await addon.failure('delete table ip nosuchtable', { dryRun: true });
  t.match(kernel.nftMessage, /No such file or directory/, 'the kernel still checks it');
});

t.test('a 100 000-element set applies while the event loop keeps ticking', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  const count = 100_000;
  const elements: string[] = [];
  // Every other /32 in 10/8, so that no two elements merge into one interval.
  for (let i = 0; i < count; i += 1) {
    const n = (10 << 24) + 2 * i;
    elements.push(`${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`);
  }
  const script = `table ip big {\n set s {\n type ipv4_addr\n flags interval\n elements = { ${elements.join(', ')} }\n }\n}\n`;
  // A blocked loop shows as one gap close to the whole apply; a loop that ran shows many ticks and
  // gaps far shorter than the apply. How short they are depends on the machine and its load (a
  // figure for the bench: docs/bench.md, the churn's stalls), so only the behaviour is asserted.
  const report = await addon.value<TickReport>({ op: 'runWhileTicking', script, tickMs: 5 });
  t.comment(
    `apply ${report.elapsedMs.toFixed(0)} ms, ${report.ticks} ticks, max gap ${report.maxGapMs.toFixed(1)} ms`,
  );
  t.ok(report.elapsedMs > 200, 'the apply lasted long enough for a blocked loop to show');
  t.ok(report.maxGapMs < report.elapsedMs / 2, 'the loop ran during the apply');
  t.ok(report.ticks >= 10, `the timer fired ${report.ticks} times during it`);
  const listed = setElementsFromJson(await addon.runNft('list set ip big s', { json: true }));
  t.equal(listed.length, count, 'all elements are in the kernel');
  t.equal(listed[count - 1], elements[count - 1]);
});

t.test('20 concurrent calls all complete with their own results', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  const indexes = Array.from({ length: 20 }, (_, i) => i);
  const element = (i: number) => `10.${i}.0.0/16`;
  const adds = await addon.value<Outcome[]>({
    op: 'runConcurrently',
    calls: indexes.map((i) => ({
      script: `table ip c${i} { set s { type ipv4_addr; flags interval; elements = { ${element(i)} }; }; }`,
    })),
  });
  t.same(
    adds,
    indexes.map(() => ({ ok: true, value: '' })),
    'every add succeeded',
  );
  const lists = await addon.value<Outcome[]>({
    op: 'runConcurrently',
    calls: indexes.map((i) => ({ script: `list set ip c${i} s`, json: true })),
  });
  for (const i of indexes) {
    const outcome = lists[i];
    t.ok(outcome?.ok, `list c${i}`);
    if (outcome?.ok)
      t.same(setElementsFromJson(outcome.value as string), [element(i)], `c${i} content`);
  }
  const tables = (await nftCli(addon.ns, 'list', 'tables')).match(/table ip c\d+/g) ?? [];
  t.equal(tables.length, 20, 'nft CLI sees the 20 tables');
});

t.test('2 000 calls in a row grow RSS by less than 8 MiB', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  const script = 'add table ip x\ndelete table ip x\n';
  await addon.value({ op: 'runRepeatedly', script, count: 200 });
  const before = await addon.value<number>({ op: 'rss' });
  const generation = await addon.generation();
  await addon.value({ op: 'runRepeatedly', script, count: 2000 });
  const after = await addon.value<number>({ op: 'rss' });
  t.equal(await addon.generation(), generation + 2000, 'each call committed');
  const growthMiB = (after - before) / 2 ** 20;
  t.comment(`RSS ${(before / 2 ** 20).toFixed(1)} → ${(after / 2 ** 20).toFixed(1)} MiB`);
  t.ok(growthMiB < 8, `RSS growth ${growthMiB.toFixed(2)} MiB < 8 MiB`);
});

t.test('nftGenerationId moves by one per committed transaction only', async (t) => {
  if (!requireRoot(t)) return;
  const addon = await startAddon(t);
  const g0 = await addon.generation();
  t.type(g0, 'number');
  t.ok(Number.isInteger(g0) && g0 >= 0, 'a u32');
  await addon.runNft('add table ip g');
  t.equal(await addon.generation(), g0 + 1, 'commit through the addon');
  await addon.runNft('list ruleset');
  await addon.runNft('list table ip g', { json: true });
  t.equal(await addon.generation(), g0 + 1, 'lists do not move it');
  await addon.failure('add table ip g\ndelete table ip nosuchtable\n');
  t.equal(await addon.generation(), g0 + 1, 'a failed command does not move it');
  await addon.runNft('add table ip other', { dryRun: true });
  t.equal(await addon.generation(), g0 + 1, 'a dry-run does not move it');
  await nftCli(addon.ns, 'add', 'table', 'ip', 'fromcli');
  t.equal(await addon.generation(), g0 + 2, 'a commit by another tool moves it');
  await addon.runNft('add table ip g2\nadd table ip g3\n');
  t.equal(await addon.generation(), g0 + 3, 'a multi-command script is one transaction');
});

function parseOk(text: string): Config {
  const result = parseConfigText(text, 'test', {
    enableIPv6: true,
    nomasqAllReservedRanges: false,
  });
  if (!result.ok) throw result.error;
  return result.config;
}

/** An IPv4 address as a bigint. */
const v4 = (text: string) =>
  text.split('.').reduce((n, part) => n * 256n + BigInt(Number(part)), 0n);
const one = (text: string) => [v4(text), v4(text)] as const;
const EVERY_V4 = [[0n, 2n ** 32n - 1n]] as const;

/**
 * The addon's namespace as a node: the pod network on pod0, the uplinks up0 (192.0.2.1, to
 * 198.19.0.0/16) and up1 (203.0.113.1, to 198.51.100.0/24), forwarding on; and conntrack entries
 * made with conntrack -I, listed as "SRC>DST" by what is left.
 */
async function nodeWithEntries(t: Test) {
  const addon = await startAddon(t);
  const ip = (line: string) => inNetns(addon.ns, 'ip', line.split(' '));
  for (const [name, address] of [
    ['pod0', '10.244.1.1/24'],
    ['up0', '192.0.2.1/24'],
    ['up1', '203.0.113.1/24'],
  ] as const) {
    // veth pairs, both ends here: this kernel may have no dummy driver.
    await ip(`link add ${name} type veth peer name ${name}-peer`);
    await ip(`address add ${address} dev ${name}`);
    await ip(`link set ${name}-peer up`);
    await ip(`link set ${name} up`);
  }
  await ip('link set lo up');
  await ip('route add 198.19.0.0/16 dev up0');
  await ip('route add 198.51.100.0/24 dev up1');
  await inNetns(addon.ns, 'sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
  /** A UDP entry from SRC to DST (sport 1000, dport 53), optionally replied and translated. */
  const insert = (
    src: string,
    dst: string,
    opts: { replied?: boolean; snat?: string; proto?: string; reply?: string } = {},
  ) =>
    inNetns(addon.ns, 'conntrack', [
      '-I',
      ...['-p', opts.proto ?? 'udp', '-s', src, '-d', dst, '--sport', '1000', '--dport', '53'],
      ...['-t', '300'],
      ...(opts.proto === 'tcp' ? ['--state', 'ESTABLISHED'] : []),
      ...(opts.replied ? ['-u', 'SEEN_REPLY'] : []),
      ...(opts.snat ? ['--src-nat', opts.snat] : []),
      // A DNAT'd flow: its reply comes from `reply` (the backend) back to the sender.
      ...(opts.reply
        ? ['-r', opts.reply, '-q', src, '--reply-port-src', '53', '--reply-port-dst', '1000']
        : []),
    ]);
  const left = async () =>
    (await inNetns(addon.ns, 'conntrack', ['-L'])).stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => /src=(\S+) dst=(\S+)/.exec(line)?.slice(1).join('>'))
      .sort();
  const clear = () => inNetns(addon.ns, 'conntrack', ['-F']).catch(() => undefined);
  /** The kernel's id of the entry to DST. */
  const idOf = async (dst: string) =>
    /id=(\d+)/.exec(
      (await inNetns(addon.ns, 'conntrack', ['-L', '-o', 'id', '-d', dst])).stdout,
    )?.[1];
  return { addon, insert, left, clear, idOf };
}

t.test(
  'the conntrack judge: destinations that flipped, entries carrying the old decision only, deleted by id',
  async (t) => {
    if (!requireRoot(t)) return;
    const { addon, insert, left, clear, idOf } = await nodeWithEntries(t);
    t.match(await addon.judge({ family: 4, lost: [...EVERY_V4] }), { seen: 0, now: 0 }, 'no entry');
    // 10.0.0.0/16 was exempt and is translated now.
    for (const dst of ['10.0.0.0', '10.0.255.255', '10.1.0.0', '9.255.255.255'])
      await insert('10.244.1.2', dst, { replied: true });
    await insert('10.244.1.3', '10.0.0.9', { snat: '192.0.2.1' }); // someone else translated it
    await insert('10.244.1.2', '10.0.0.7', { proto: 'tcp' });
    const lost = [[v4('10.0.0.0'), v4('10.0.255.255')] as const];
    const judged = await addon.judge({ family: 4, lost });
    t.match(
      judged,
      { seen: 6, now: 2, later: 0, hold: 2, unjudged: 0 },
      'both ends of the range, UDP only, untranslated only; their replies to hold',
    );
    t.same((await addon.remove(judged.plan)).deleted, [[17, 2]]);
    t.same(await left(), [
      '10.244.1.2>10.0.0.7',
      '10.244.1.2>10.1.0.0',
      '10.244.1.2>9.255.255.255',
      '10.244.1.3>10.0.0.9',
    ]);
    t.match(await addon.judge({ family: 4, protocols: [], lost }), { now: 1 }, 'all: TCP too');

    // Deleted only while it is the same entry: one made anew meanwhile (another id) stays.
    await clear();
    await insert('10.244.1.2', '10.0.0.1', { replied: true });
    const staleId = await idOf('10.0.0.1');
    const stale = await addon.judge({ family: 4, lost });
    await clear();
    // The kernel's id is a hash of the entry's memory and tuple: an entry made in the freed slot has
    // the old id and is, to the kernel, the same entry. Other entries take freed slots first (a few
    // tries: the slots are per CPU), so that the new one is another entry, as a flow made anew is.
    for (let filler = 0; filler < 8; filler++) {
      await insert('10.244.1.9', `10.9.9.${filler}`, { replied: true });
      await insert('10.244.1.2', '10.0.0.1', { replied: true });
      if ((await idOf('10.0.0.1')) !== staleId) break;
      await inNetns(addon.ns, 'conntrack', ['-D', '-d', '10.0.0.1']);
    }
    t.not(await idOf('10.0.0.1'), staleId, 'the new entry has another id');
    t.same((await addon.remove(stale.plan)).deleted, [], 'a new entry on the same addresses stays');
    t.ok((await left()).includes('10.244.1.2>10.0.0.1'), 'it is still there');

    // After DNAT: judged by the backend (the reply's source), the address postrouting decided on.
    await clear();
    await insert('10.244.1.2', '10.96.0.10', { reply: '198.18.0.1' });
    t.match(
      await addon.judge({ family: 4, lost: [one('10.96.0.10')] }),
      { now: 0 },
      'not by the Service IP',
    );
    t.match(
      await addon.judge({ family: 4, lost: [one('198.18.0.1')] }),
      { now: 1 },
      'by its backend',
    );

    // A flow to a local address never reaches our chain: never taken, whatever flipped.
    await clear();
    await insert('198.19.0.4', '192.0.2.1', { replied: true });
    t.match(await addon.judge({ family: 4, lost: [...EVERY_V4] }), { seen: 1, now: 0 });

    // Translated to exempt: a replied entry goes now, one waiting for its first reply later.
    await clear();
    await insert('10.244.1.2', '10.0.0.1', { snat: '192.0.2.1', replied: true });
    await insert('10.244.1.3', '10.0.0.1', { snat: '192.0.2.1' });
    const gained = await addon.judge({ family: 4, gained: lost });
    t.match(gained, { now: 1, later: 1, hold: 0 });
    t.same((await addon.remove(gained.plan, 'later')).deleted, [[17, 1]]);
    t.same(await left(), ['10.244.1.2>10.0.0.1']);

    // IPv6, by the kernel's family filter.
    await insert('fd00::1', 'fd12::5', { replied: true });
    const six = await addon.judge({ family: 6, lost: [[0xfd12n << 112n, (0xfd13n << 112n) - 1n]] });
    t.match(six, { seen: 1, now: 1, hold: 1 });
  },
);

t.test(
  'the conntrack judge: a policy change takes the flows it changes, by source, interface and SNAT target',
  async (t) => {
    if (!requireRoot(t)) return;
    const { addon, insert, left, clear } = await nodeWithEntries(t);
    const exemptAfter = [[v4('10.0.0.0'), v4('10.255.255.255')] as const];
    const pods = [[v4('10.244.0.0'), v4('10.244.255.255')] as const];
    const judge = (before: object, after: object, protocols?: number[]) =>
      addon.judge({ family: 4, exemptAfter, before, after, ...(protocols ? { protocols } : {}) });

    // sourceCIDRs given: flows from elsewhere (the node's own, 192.0.2.1) are left alone now.
    await insert('10.244.1.2', '198.19.0.4', { snat: '192.0.2.1', replied: true });
    await insert('192.0.2.1', '198.19.0.4', { snat: '192.0.2.1:40000', replied: true });
    await insert('192.0.2.1', '10.9.0.1', { replied: true }); // exempt in both
    await insert('10.244.1.2', '10.9.0.1', { replied: true }); // exempt in both
    const bySource = await judge({}, { sources: pods });
    t.match(bySource, { now: 1, hold: 0 }, "only the node's translated flow");
    await addon.remove(bySource.plan);
    t.same(await left(), ['10.244.1.2>10.9.0.1', '10.244.1.2>198.19.0.4', '192.0.2.1>10.9.0.1']);

    // egressInterfaces [up1] appear: a pod's flow out through up0 is left alone now; out through
    // up1 it is translated as before; to where no route leads it cannot be judged, and stays.
    await clear();
    await insert('10.244.1.2', '198.19.0.4', { snat: '192.0.2.1', replied: true });
    await insert('10.244.1.2', '198.51.100.7', { snat: '203.0.113.1', replied: true });
    await insert('10.244.1.2', '100.64.0.1', { snat: '192.0.2.1', replied: true });
    await insert('192.0.2.1', '198.19.0.9', { snat: '192.0.2.1:40000', replied: true });
    const byInterface = await judge({}, { interfaces: ['up1'] });
    t.match(byInterface, { now: 2, unjudged: 1 }, 'the pod and the node leaving up0; one unjudged');
    await addon.remove(byInterface.plan);
    t.same(await left(), ['10.244.1.2>100.64.0.1', '10.244.1.2>198.51.100.7']);
    t.match(
      await judge({ interfaces: ['up*'] }, { interfaces: ['up1'] }),
      { now: 0 },
      'left: 100.64 unjudged again',
    );
    t.match(
      await judge({ interfaces: ['up1'] }, { interfaces: ['up1', 'eth0'] }),
      { now: 0, unjudged: 1 },
      'a list change that takes nothing here: only the flow with no route is not judged',
    );
    t.match(
      await judge({ interfaces: ['up1'] }, { interfaces: ['up1'], sources: pods }),
      { now: 0, unjudged: 0 },
      'the same list, a change that decides nothing otherwise: no route looked up',
    );

    // snatAddress given: translated flows go unless already translated to it.
    await clear();
    await insert('10.244.1.2', '198.19.0.4', { snat: '192.0.2.1', replied: true });
    await insert('10.244.1.3', '198.19.0.4', { snat: '192.0.2.10', replied: true });
    await insert('10.244.1.4', '10.9.0.1', { replied: true });
    const snat = [v4('192.0.2.10'), v4('192.0.2.10')] as const;
    const bySnat = await judge({}, { snat });
    t.match(
      bySnat,
      { now: 1 },
      'the masqueraded one; the one on the new address and the exempt one stay',
    );
    await addon.remove(bySnat.plan);
    t.same(await left(), ['10.244.1.3>198.19.0.4', '10.244.1.4>10.9.0.1']);
    t.match(await judge({ snat }, {}), { now: 1 }, 'and back: the one on the old address');
  },
);

t.test(
  "held replies: written as nft would, listed alike, each for the set's own timeout",
  async (t) => {
    if (!requireRoot(t)) return;
    const { addon, insert } = await nodeWithEntries(t);
    const table = compile(
      parseOk('nonMasqueradeCIDRs: [10.0.0.0/8]\n'),
      compileOptions({ enableIPv6: true }),
      1,
    );
    await addon.runNft(table.map((table) => renderTable(table)).join(''));
    await insert('10.244.1.2', '10.0.0.1', { replied: true });
    await insert('fd00:10:244::2', 'fd12::1', { replied: true });
    const v4Plan = await addon.judge({ family: 4, lost: [one('10.0.0.1')] });
    const v6Plan = await addon.judge({
      family: 6,
      lost: [[0xfd12n << 112n, (0xfd13n << 112n) - 1n]],
    });
    const step = await addon.hold(v4Plan.plan);
    t.equal(step.after, (step.before ?? -2) + 1, 'one commit');
    await addon.hold(v6Plan.plan);
    const listed = async (family: string) =>
      (await inNetns(addon.ns, 'nft', ['list', 'set', family, 'ipmasq', 'late-replies'])).stdout
        .replace(/ expires \S+/g, '')
        .replace(/\s+/g, ' ');
    const held = { ip: await listed('ip'), ip6: await listed('ip6') };
    t.match(held.ip, /elements = \{ 10\.0\.0\.1 \. 53 \. 10\.244\.1\.2 \. 1000 \}/);
    t.match(held.ip6, /elements = \{ fd12::1 \. 53 \. fd00:10:244::2 \. 1000 \}/);
    // The same elements written by nft itself list the same.
    await addon.runNft(
      'flush set ip ipmasq late-replies\nflush set ip6 ipmasq late-replies\n' +
        'add element ip ipmasq late-replies { 10.0.0.1 . 53 . 10.244.1.2 . 1000 }\n' +
        'add element ip6 ipmasq late-replies { fd12::1 . 53 . fd00:10:244::2 . 1000 }\n',
    );
    t.same({ ip: await listed('ip'), ip6: await listed('ip6') }, held, "identical to nft's own");
    await addon.hold(v4Plan.plan);
    const expiry = /expires (\d+)s/.exec(
      (await inNetns(addon.ns, 'nft', ['list', 'set', 'ip', 'ipmasq', 'late-replies'])).stdout,
    );
    t.ok(expiry && Number(expiry[1]) <= 3, `the set's own 3 s (${expiry?.[0]})`);
    const capped = await addon.judge({ family: 4, lost: [one('10.0.0.1')], holdMax: 0 });
    t.match(capped, { now: 1, hold: 0 }, 'held no more than asked');
  },
);

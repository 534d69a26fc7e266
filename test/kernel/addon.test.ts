// The nftables addon against the real kernel. Each test gets a fresh network namespace with the
// addon running in a child process inside it (fixtures/addon-server.ts: the addon's threads cannot
// be moved into a namespace from here); this process drives it, and checks the kernel with `nft`.
import t from 'tap';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { startAddon } from './fixtures/addon-client.js';
import type { Outcome, TickReport } from './fixtures/addon-server.js';

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
  // A blocked loop shows in every run as a gap close to the whole apply. Other processes on a
  // loaded machine add gaps of their own (up to ~100 ms seen with no work at all), so the 50 ms
  // bound must hold in at least one of up to three runs, and the blocking check in all.
  const reports: TickReport[] = [];
  for (let attempt = 0; attempt < 3; attempt += 1) {
    if (attempt > 0) await addon.runNft('delete table ip big');
    const report = await addon.value<TickReport>({ op: 'runWhileTicking', script, tickMs: 5 });
    reports.push(report);
    t.comment(
      `apply ${report.elapsedMs.toFixed(0)} ms, ${report.ticks} ticks, max gap ${report.maxGapMs.toFixed(1)} ms`,
    );
    if (report.maxGapMs <= 50) break;
  }
  for (const report of reports) {
    t.ok(report.elapsedMs > 200, 'the apply lasted long enough for a blocked loop to show');
    t.ok(report.maxGapMs < report.elapsedMs / 2, 'the loop ran during the apply');
  }
  const bestGapMs = Math.min(...reports.map((report) => report.maxGapMs));
  t.ok(bestGapMs <= 50, `timer gaps stay ≤ 50 ms (max ${bestGapMs.toFixed(1)} ms)`);
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

t.test(
  'conntrackFlush deletes exactly the entries in the ranges, of the protocols asked for',
  async (t) => {
    if (!requireRoot(t)) return;
    const addon = await startAddon(t);
    const insert = (...args: string[]) =>
      inNetns(addon.ns, 'conntrack', [
        '-I',
        ...args,
        '--sport',
        '1000',
        '--dport',
        '53',
        '-t',
        '300',
      ]);
    const listed = async () =>
      (await inNetns(addon.ns, 'conntrack', ['-L'])).stdout
        .split('\n')
        .filter(Boolean)
        .map((line) => /^(\w+).*? dst=(\S+)/.exec(line)?.slice(1).join(' '))
        .sort();
    t.same(
      await addon.conntrackFlush(4, [17], [[0n, 2n ** 32n - 1n]]),
      {
        seen: 0,
        deleted: [],
        error: null,
      },
      'no entry: nothing to do, no error',
    );
    for (const dst of ['10.0.0.0', '10.0.255.255', '10.1.0.0', '9.255.255.255'])
      await insert('-p', 'udp', '-s', '192.0.2.1', '-d', dst);
    await insert('-p', 'tcp', '-s', '192.0.2.1', '-d', '10.0.0.7', '--state', 'ESTABLISHED');
    await insert('-p', 'udp', '-s', 'fd00::1', '-d', 'fd12::5');
    const v4 = (a: number, b: number, c: number, d: number) =>
      BigInt(((a * 256 + b) * 256 + c) * 256 + d);
    const result = await addon.conntrackFlush(
      4,
      [17, 136],
      [[v4(10, 0, 0, 0), v4(10, 0, 255, 255)]],
    );
    t.same(
      result,
      { seen: 5, deleted: [[17, 2]], error: null },
      'both ends of the range, UDP only; the kernel dumped the 5 IPv4 entries, not the IPv6 one',
    );
    t.same(await listed(), ['tcp 10.0.0.7', 'udp 10.1.0.0', 'udp 9.255.255.255', 'udp fd12::5']);
    const all = await addon.conntrackFlush(4, [], [[v4(10, 0, 0, 0), v4(10, 0, 255, 255)]]);
    t.same(all.deleted, [[6, 1]], 'every protocol: the TCP entry too');
    const six = await addon.conntrackFlush(6, [17], [[0xfd12n << 112n, (0xfd13n << 112n) - 1n]]);
    t.same(six.deleted, [[17, 1]], 'IPv6');
    t.same(await listed(), ['udp 10.1.0.0', 'udp 9.255.255.255']);

    // After DNAT: a pod's flow to a Service IP whose reply comes from its backend. Matched by the
    // backend's address (the one postrouting decided on), not by the Service IP.
    const service = v4(10, 96, 0, 10);
    const backend = v4(198, 18, 0, 1);
    await insert(
      ...['-p', 'udp', '-s', '10.244.1.2', '-d', '10.96.0.10'],
      ...['-r', '198.18.0.1', '-q', '10.244.1.2', '--reply-port-src', '9999'],
      ...['--reply-port-dst', '1000'],
    );
    t.same(
      await addon.conntrackReplies(4, [[backend, backend]]),
      [
        {
          source: '198.18.0.1',
          sourcePort: 9999,
          destination: '10.244.1.2',
          destinationPort: 1000,
        },
      ],
      'its reply, listed (no SNAT: it goes to the pod): nothing deleted',
    );
    const byService = await addon.conntrackFlush(4, [17], [[service, service]]);
    t.same(byService.deleted, [], 'not by the Service IP');
    const byBackend = await addon.conntrackFlush(4, [17], [[backend, backend]]);
    t.same(byBackend.deleted, [[17, 1]], 'by its backend');
    t.same(await listed(), ['udp 10.1.0.0', 'udp 9.255.255.255']);

    // A changed sourceCIDRs (README, "Egress policy"): only the flows of the senders it concerns.
    await insert('-p', 'udp', '-s', '10.244.1.2', '-d', '198.19.0.4');
    await insert('-p', 'udp', '-s', '10.250.1.2', '-d', '198.19.0.4');
    const pods: [bigint, bigint] = [v4(10, 244, 0, 0), v4(10, 244, 255, 255)];
    const bySender = await addon.conntrackFlush(4, [17], [[0n, 2n ** 32n - 1n]], {
      sources: [pods],
    });
    t.same(bySender.deleted, [[17, 1]], 'the pod range sender only');
    t.same(await listed(), ['udp 10.1.0.0', 'udp 198.19.0.4', 'udp 9.255.255.255']);
    // A changed snatAddress: only translated flows, and none of these is.
    const translated = await addon.conntrackFlush(4, [17], [[0n, 2n ** 32n - 1n]], {
      translatedOnly: true,
    });
    t.same(translated.deleted, [], 'no untranslated flow is deleted');
    t.equal((await listed()).length, 3);
  },
);

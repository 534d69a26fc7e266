// Conntrack health from /proc/net/stat/nf_conntrack: the header names the columns (a kernel may have
// more or fewer of them), each CPU's line is hexadecimal, `entries` is the table's count on every line.
import t from 'tap';
import {
  parseConntrackMax,
  parseConntrackStat,
  readConntrackHealth,
} from '../../../src/reconcile/conntrack-health.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';

// As kernel 6.x prints it, with counts made up: two CPUs.
const STAT = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
0000002a  00000003 00000000 00000000 00000010 00000000 00000000 00000000 00000000 00000001 00000002 00000000 00000000  00000000 00000000 00000000 00000000
0000002a  00000004 00000000 00000000 00000000 00000000 00000000 00000000 00000000 0000000a 00000000 00000005 00000000  00000000 00000000 00000000 00000000
`;

t.test('entries from one line, events summed over the CPUs', async (t) => {
  t.same(parseConntrackStat(STAT), {
    entries: 42,
    events: { insert_failed: 11, drop: 2, early_drop: 5, clash_resolve: 7 },
    problems: [],
  });
});

t.test('an older kernel without clashres: that kind absent, not 0', async (t) => {
  const old = STAT.replace(' clashres', '').replace(/^([0-9a-f]{8}) {2}[0-9a-f]{8}/gm, '$1');
  const parsed = parseConntrackStat(old);
  t.equal(parsed?.entries, 42);
  t.notOk('clash_resolve' in (parsed?.events ?? {}));
  t.equal(parsed?.events.insert_failed, 11);
});

t.test('without conntrack loaded: undefined, never a throw', async (t) => {
  const missing = async () => {
    throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
  };
  t.equal(await readConntrackHealth(missing), undefined);
  const files: Record<string, string> = {
    '/proc/net/stat/nf_conntrack': STAT,
    '/proc/sys/net/netfilter/nf_conntrack_max': '262144\n',
  };
  t.same(await readConntrackHealth(async (path) => files[path]!), {
    entries: 42,
    max: 262144,
    events: { insert_failed: 11, drop: 2, early_drop: 5, clash_resolve: 7 },
    problems: [],
  });
});

t.test('nf_conntrack_max parsed strictly: nonsense is no value', async (t) => {
  t.equal(parseConntrackMax('262144\n'), 262144);
  t.equal(parseConntrackMax('0\n'), 0);
  t.equal(parseConntrackMax('2147483647\n'), 2147483647);
  for (const bad of [
    'abc',
    '-5',
    '99999999999999999999',
    '',
    ' 5',
    '5 6',
    '1e3',
    '0x10',
    '2147483648',
  ])
    t.equal(parseConntrackMax(bad), undefined, JSON.stringify(bad));
});

t.test('/proc/net/stat/nf_conntrack parsed strictly', async (t) => {
  const bad = STAT.replace(/^0000002a {2}00000003/m, '0000002a  zz000003');
  const parsed = parseConntrackStat(bad)!;
  t.notOk('clash_resolve' in parsed.events, 'a column with a non-hexadecimal field: absent');
  t.equal(parsed.events.drop, 2, 'the others read');
  t.match(parsed.problems, [/column clashres/]);
  const short = STAT.replace(/ 00000000\n$/, '\n');
  t.same(parseConntrackStat(short)!.events, {}, 'a line of another width: nothing trusted');
  t.match(parseConntrackStat(short)!.problems, [/number of fields/]);
  const huge = STAT.replace(/^0000002a/gm, 'ffffffffffffffffff');
  t.equal(parseConntrackStat(huge)!.entries, undefined, 'beyond a safe integer: absent');
});

t.test('a nonsensical nf_conntrack_max: the series absent, one warning', async (t) => {
  for (const max of ['abc\n', '-5\n', '99999999999999999999\n']) {
    const files: Record<string, string> = {
      '/proc/net/stat/nf_conntrack': STAT,
      '/proc/sys/net/netfilter/nf_conntrack_max': max,
    };
    const warned: string[] = [];
    const metrics = new AgentMetrics();
    metrics.conntrackHealth(
      () => readConntrackHealth(async (path) => files[path]!),
      (problem) => warned.push(problem),
    );
    const body = await metrics.exposition(0);
    t.notMatch(body, /^ipmasq_conntrack_max /m, `${JSON.stringify(max)}: no series`);
    t.match(body, /^ipmasq_conntrack_entries 42$/m, 'entries still there');
    await new Promise((resolve) => setTimeout(resolve, 1_050));
    await metrics.exposition(0);
    t.equal(warned.length, 1, 'one warning over two reads');
    t.match(warned[0], /nf_conntrack_max holds .*not a count/);
  }
});

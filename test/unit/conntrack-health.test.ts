// Conntrack health from /proc/net/stat/nf_conntrack: the header names the columns (a kernel may have
// more or fewer of them), each CPU's line is hexadecimal, `entries` is the table's count on every line.
import t from 'tap';
import { parseConntrackStat, readConntrackHealth } from '../../src/reconcile/conntrack-health.js';

// As kernel 6.x prints it, with counts made up: two CPUs.
const STAT = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
0000002a  00000003 00000000 00000000 00000010 00000000 00000000 00000000 00000000 00000001 00000002 00000000 00000000  00000000 00000000 00000000 00000000
0000002a  00000004 00000000 00000000 00000000 00000000 00000000 00000000 00000000 0000000a 00000000 00000005 00000000  00000000 00000000 00000000 00000000
`;

t.test('entries from one line, events summed over the CPUs', async (t) => {
  t.same(parseConntrackStat(STAT), {
    entries: 42,
    events: { insert_failed: 11, drop: 2, early_drop: 5, clash_resolve: 7 },
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
  });
});

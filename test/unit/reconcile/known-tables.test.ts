// What the converger knows the kernel holds of our tables, as one value moved by named transitions
// (src/reconcile/known-tables.ts): held (written or found), confirmed, doubted, the rules taken.
import t from 'tap';
import { KnownTables } from '../../../src/reconcile/known-tables.js';
import type { Table } from '../../../src/nftables/types.js';
import type { RuleFingerprints } from '../../../src/reconcile/netlink-audit.js';

const table = (family: 'ip' | 'ip6', name = 'ipmasq'): Table =>
  ({ family, name, comment: '', sets: [], chains: [] }) as unknown as Table;
const rules: RuleFingerprints = new Map([['ip', new Map([['postrouting', ['jump']]])]]);

t.test('nothing known before a write or a find', async (t) => {
  const known = new KnownTables();
  t.equal(known.tables.size, 0);
  t.equal(known.key, undefined);
  t.equal(known.at, undefined);
  t.equal(known.since, undefined);
  t.equal(known.rules, undefined);
});

t.test(
  'held: the tables, their key and where they are known; since only with tables',
  async (t) => {
    const known = new KnownTables();
    known.hold([table('ip'), table('ip6')], 'k1', 40);
    t.same([...known.tables.keys()], ['ip', 'ip6']);
    t.equal(known.key, 'k1');
    t.equal(known.at, 40);
    t.equal(known.since, 40);
    known.hold([table('ip')], 'k2', 41);
    t.same([...known.tables.keys()], ['ip'], 'a family not held again is gone');
    t.equal(known.key, 'k2');
    known.hold([], 'k3', 42);
    t.equal(known.at, 42, 'the generation id as given');
    t.equal(known.since, undefined, 'but no table of ours to be known at it');
  },
);

t.test('held with no generation id known: tables and key kept, in doubt', async (t) => {
  const known = new KnownTables();
  known.hold([table('ip')], 'k1', undefined);
  t.equal(known.tables.size, 1);
  t.equal(known.key, 'k1');
  t.equal(known.since, undefined);
});

t.test('doubted, then confirmed by an audit: the tables and key stay throughout', async (t) => {
  const known = new KnownTables();
  known.hold([table('ip')], 'k1', 7);
  known.doubt();
  t.equal(known.at, undefined);
  t.equal(known.since, undefined);
  t.equal(known.key, 'k1');
  t.equal(known.tables.size, 1);
  known.confirm(9);
  t.equal(known.since, 9);
  known.confirm(undefined);
  t.equal(known.since, undefined, 'an audit whose end is not known confirms nothing');
});

t.test("the rules taken are the rules' own: a later hold keeps them", async (t) => {
  const known = new KnownTables();
  known.hold([table('ip')], 'k1', 1);
  known.takeRules(rules);
  known.hold([table('ip')], 'k2', 2);
  t.equal(known.rules, rules, 'an element-only write leaves every rule as it was');
  known.doubt();
  t.equal(known.rules, rules, 'a doubt leaves them, as the write that follows needs them');
  known.takeRules(undefined);
  t.equal(known.rules, undefined);
});

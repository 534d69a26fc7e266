// An everyday edit's transaction (nftables/change.ts elementEdit) holds only the changed elements
// and the mark's rule: one CIDR in or out of the concatenated sets or of plain interval sets, with
// and without the egress policy's sets beside them; anything else (a rule or a key changed, a plain
// interval set emptied or filled from empty) is not an element edit and goes through libnftables.
import t from 'tap';
import { compile } from '../../../src/compile.js';
import { parseConfigText } from '../../../src/config/index.js';
import { elementEdit, renderElementEdit } from '../../../src/nftables/change.js';
import type { Table } from '../../../src/nftables/types.js';
import { compileOptions } from '../../helpers/compile-options.js';

const options = (setLayout: 'concat' | 'interval') => compileOptions({ setLayout });

function tables(text: string, layout: 'concat' | 'interval', generation: number): Table[] {
  const result = parseConfigText(text, 'case', {
    enableIPv6: false,
    nomasqAllReservedRanges: false,
  });
  if (!result.ok) throw result.error;
  return compile(result.config, options(layout), generation, 'minx3e9s.001');
}

const POLICY = 'sourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0, "ens*"]\n';
const list = (cidrs: string[]) => `nonMasqueradeCIDRs: [${cidrs.join(', ')}]\n`;

for (const [name, extra] of [
  ['alone', ''],
  ["beside the egress policy's sets", POLICY],
] as const) {
  t.test(`one CIDR added and one removed, ${name}: those two and the mark`, async (t) => {
    const [before] = tables(list(['10.0.0.0/16', '10.2.0.0/16']) + extra, 'concat', 1);
    const [after] = tables(list(['10.0.0.0/16', '10.4.0.0/16']) + extra, 'concat', 2);
    const edit = elementEdit(after!, before!);
    if (!edit) return t.fail('an element edit');
    t.same(
      edit.sets.map((s) => [s.set.name, [...s.removed], [...s.added]]),
      [['nonmasq', ['10.2.0.0/16'], ['10.4.0.0/16']]],
      'only the changed elements of the one set that changed',
    );
    t.equal(edit.chain, 'postrouting');
    t.match(
      edit.wasMark,
      /^ipmasq-agent generation 1 config sha256:[0-9a-f]{64} by:minx3e9s\.001$/,
    );
    t.match(edit.mark, /^ipmasq-agent generation 2 config sha256:[0-9a-f]{64} by:minx3e9s\.001$/);
    const script = renderElementEdit([edit]).trim().split('\n');
    t.same(
      script
        .filter((line) => !/^\t|^}$|^table ip ipmasq \{$/.test(line))
        .map((l) => l.split(' ').slice(0, 2).join(' ')),
      ['delete element', 'flush chain', 'add rule'],
      'what libnftables would be given: the deletion, the addition block, the mark rule',
    );
    t.ok(
      script.some((line) => line.includes('10.4.0.0/16 . 0-255')),
      'the addition',
    );
  });
}

t.test('not element edits: left to libnftables', async (t) => {
  const base = list(['10.0.0.0/16', '10.2.0.0/16']);
  const [interval1] = tables(base, 'interval', 1);
  const [interval2] = tables(list(['10.0.0.0/16']), 'interval', 2);
  t.same(
    elementEdit(interval2!, interval1!)?.sets.map((x) => [
      x.set.name,
      [...x.removed],
      [...x.added],
    ]),
    [['nonmasq', ['10.2.0.0/16'], []]],
    'a plain interval set changed: an element edit of it',
  );
  const [filled] = tables(base + 'masqueradeCIDRs: [10.2.5.0/24]\n', 'interval', 2);
  t.equal(elementEdit(filled!, interval1!), undefined, 'a plain interval set filled from empty');
  t.equal(elementEdit(interval1!, filled!), undefined, 'a plain interval set emptied');
  const [concat1] = tables(base, 'concat', 1);
  const [policy] = tables(base + POLICY, 'concat', 2);
  t.equal(
    elementEdit(policy!, concat1!),
    undefined,
    "the egress policy's sets and rules appearing",
  );
  const [same] = tables(base, 'concat', 1);
  t.equal(elementEdit(same!, concat1!), undefined, 'the same mark: not a write of this kind');
  const [masq] = tables(base + 'masqueradeCIDRs: [10.2.5.0/24]\n', 'concat', 2);
  const edit = elementEdit(masq!, concat1!);
  t.same(
    edit?.sets.map((s) => [s.set.name, [...s.removed], [...s.added]]),
    [['masq', [], ['10.2.5.0/24']]],
    'masqueradeCIDRs appearing is an element edit of its set',
  );
});

t.test(
  'a plain interval set changed wholesale: flushed and refilled in the same batch',
  async (t) => {
    const many = (base: number) =>
      Array.from({ length: 12 }, (_, i) => `10.${base + 2 * i}.0.0/16`); // apart: never merged
    const [before] = tables(list(many(0)), 'interval', 1);
    const [after] = tables(list(many(100)), 'interval', 2);
    const edit = elementEdit(after!, before!);
    if (!edit) return t.fail('an element edit');
    t.same(
      edit.sets.map((s) => [s.set.name, [...s.removed], [...s.added], s.refill]),
      [['nonmasq', [], [...after!.sets.find((s) => s.name === 'nonmasq')!.elements], true]],
      'twelve removals: the set refilled with every element it is to hold, none deleted one by one',
    );
    const script = renderElementEdit([edit]).trim().split('\n');
    t.equal(
      script[0],
      'flush set ip ipmasq nonmasq',
      'what libnftables would be given: the flush first',
    );
    t.ok(
      script.some((line) => line.includes('10.122.0.0/16')),
      'then every element of the new list',
    );
    const [fewer] = tables(list(many(0).slice(0, 11)), 'interval', 2);
    t.notOk(
      elementEdit(fewer!, before!)?.sets.some((s) => s.refill),
      'one removal of twelve: deleted alone, no refill',
    );
    const [concatBefore] = tables(list(many(0)), 'concat', 1);
    const [concatAfter] = tables(list(many(100)), 'concat', 2);
    t.notOk(
      elementEdit(concatAfter!, concatBefore!)?.sets.some((s) => s.refill),
      'a concatenated set is never flushed (its flush is slow in the kernel)',
    );
  },
);

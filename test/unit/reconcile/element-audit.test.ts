// The audit of an element-only write (src/reconcile/element-audit.ts), as bookkeeping: what it
// reads, the verdict it gives, and how often it tries again when another commit was in its way.
// The audit against the kernel is tested with real writes (test/faults/foreign-element-write.test.ts).
import t from 'tap';
import { ElementWriteAudit } from '../../../src/reconcile/element-audit.js';
import { frozenElements, type ElementEdit, type SetAudit } from '../../../src/nftables/types.js';

const set = {
  name: 'nonmasq',
  key: { expression: 'ip daddr', elementSuffix: '' as const },
  flags: ['interval' as const],
  elements: frozenElements(['10.0.0.0/8']),
};
const edit: ElementEdit = {
  tables: [
    {
      family: 'ip',
      table: 'ipmasq',
      chain: 'postrouting',
      wasRule: '',
      rule: '',
      wasMark: 'ipmasq-agent generation 1',
      mark: 'ipmasq-agent generation 2',
      sets: [{ set, added: frozenElements(['10.0.0.0/8']), removed: frozenElements([]) }],
    },
  ],
};
const agrees: SetAudit = {
  held: 1,
  meant: 1,
  missingCount: 0,
  extraCount: 0,
  missing: [],
  extra: [],
};

function auditOf(found: SetAudit, comments: string[], explained: () => boolean) {
  const reads = { sets: 0, generation: 0 };
  const audit = new ElementWriteAudit({
    kernel: {
      generationId: async () => ++reads.generation,
      auditSet: async () => {
        reads.sets++;
        return found;
      },
      ruleComments: async () => comments,
    },
    metrics: { incKernelReads: () => undefined },
    explained: async () => explained(),
  });
  return { audit, reads };
}

t.test('nothing to audit: none', async (t) => {
  const { audit, reads } = auditOf(agrees, [], () => true);
  t.equal(audit.due, false);
  t.same(await audit.run(), { verdict: 'none', differences: [] });
  audit.expect(edit, undefined);
  t.equal(audit.due, false, 'a write with no generation id after it is not audited');
  t.equal(reads.sets, 0);
});

t.test('the kernel holds what the write meant: agrees, once', async (t) => {
  const { audit, reads } = auditOf(agrees, ['ipmasq-agent generation 2'], () => true);
  audit.expect(edit, 7);
  t.equal(audit.due, true);
  t.same(await audit.run(), { verdict: 'agrees', differences: [] });
  t.equal(reads.sets, 1, 'each set read back');
  t.equal(audit.due, false, 'audited');
});

t.test('a set short of an element, a chain without the mark: differs, each said', async (t) => {
  const missing = { ...agrees, held: 0, missingCount: 1, missing: ['10.0.0.0/8'] };
  const { audit } = auditOf(missing, ['ipmasq-agent generation 1'], () => true);
  audit.expect(edit, 7);
  const { verdict, differences } = await audit.run();
  t.equal(verdict, 'differs');
  t.match(differences, [
    /^set ip ipmasq nonmasq: holds 0 elements, the write meant 1; 1 missing \(10\.0\.0\.0\/8\)$/,
    /^chain ip ipmasq postrouting: no rule carries the write's mark$/,
  ]);
});

t.test('another commit in the way: moved, tried again at most three times', async (t) => {
  const { audit, reads } = auditOf(agrees, [], () => false);
  audit.expect(edit, 7);
  const verdicts: string[] = [];
  while (audit.due) verdicts.push((await audit.run()).verdict);
  t.same(verdicts, ['moved', 'moved', 'moved']);
  t.equal(reads.sets, 0, 'not read while unexplained');
});

t.test('a newer write replaces the one waiting', async (t) => {
  const { audit } = auditOf(agrees, ['ipmasq-agent generation 2'], () => true);
  audit.expect(edit, 7);
  audit.expect(undefined, 8);
  t.equal(audit.due, false, 'a whole write after it: nothing left to audit');
});

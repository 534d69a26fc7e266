// The flush's native judge takes the decision's policy steps by the slots their rows name
// (decision.ts, STEPS) and evaluates them in JUDGED_ORDER: a decision it would judge otherwise is
// refused (src/reconcile/conntrack.ts, judgedPolicy), never judged wrong.
import t from 'tap';
import { parseConfigText } from '../../../src/config/index.js';
import { decisionOf, type Decision, type Step } from '../../../src/decision.js';
import { judgedPolicy } from '../../../src/reconcile/conntrack.js';

const flags = { randomFully: false, toPorts: [] };

function decision(): Decision {
  const result = parseConfigText(
    'nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0]\n',
    'test',
    { enableIPv6: false, nomasqAllReservedRanges: false },
  );
  if (!result.ok) throw result.error;
  return decisionOf(result.config, 'ipv4', flags);
}

const withSteps = (d: Decision, steps: readonly Step[]): Decision => ({ ...d, steps });

t.test('each policy step in the slot its row names', async (t) => {
  const policy = judgedPolicy(decision());
  t.same(policy.interfaces, ['eth0']);
  t.same(policy.sources, [[BigInt(0x0af40000), BigInt(0x0af4ffff)]]);
  t.equal(policy.snat, null);
});

t.test('a decision the native judge would judge otherwise is refused', async (t) => {
  const d = decision();
  const [interfaces, sources, masq, nonmasq, last] = d.steps as Step[];
  t.throws(
    () => judgedPolicy(withSteps(d, [sources!, interfaces!, masq!, nonmasq!, last!])),
    /the flush cannot judge the egressInterfaces step/,
    'interfaces after sources',
  );
  t.throws(
    () => judgedPolicy(withSteps(d, [masq!, interfaces!, nonmasq!, last!])),
    /cannot judge the egressInterfaces step/,
    'a policy step after a destination step',
  );
  t.throws(
    () =>
      judgedPolicy(
        withSteps(d, [{ ...sources!, takes: 'listed' } as Step, masq!, nonmasq!, last!]),
      ),
    /cannot judge the sourceCIDRs step/,
    'a policy step that takes what it lists',
  );
  t.throws(
    () => judgedPolicy(withSteps(d, [interfaces!, interfaces!, masq!, nonmasq!, last!])),
    /cannot judge the egressInterfaces step/,
    'two steps in one slot',
  );
  t.doesNotThrow(
    () => judgedPolicy(withSteps(d, [interfaces!, masq!, masq!, nonmasq!, last!])),
    'destination steps, however many, after the policy',
  );
});

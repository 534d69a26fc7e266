// Readiness, its reason and lastWriteOk are derived from the reconciler's facts by one pure function.
import t from 'tap';
import { agentStatus, initialFacts, type SyncFacts } from '../../../src/reconcile/status.js';

const synced: SyncFacts = {
  ...initialFacts,
  configHash: 'a'.repeat(64),
  kernel: 'in-sync',
  generation: 3,
  lastSyncTime: new Date(0),
  counts: { ipv4: 4, ipv6: 1 },
};

t.test('each fact gives its own reason, the most fundamental first', async (t) => {
  const cases: Array<[string, Partial<SyncFacts>, RegExp | null]> = [
    ['nothing yet', initialFacts, /^no sync yet$/],
    [
      'invalid at start',
      { ...initialFacts, configError: 'bad' },
      /^config invalid, nothing applied: bad$/,
    ],
    ['in sync', {}, null],
    ['kernel not confirmed', { kernel: 'unknown' }, /^no sync yet$/],
    [
      'write failed',
      { kernel: 'failed', kernelError: 'EPERM', configError: 'bad' },
      /^kernel write failed: EPERM$/,
    ],
    [
      'invalid later',
      { configError: 'bad', otherAgent: true },
      /^config invalid, the kernel keeps the last good ruleset: bad$/,
    ],
    ['other agent', { otherAgent: true }, /another ipmasq-agent/],
  ];
  for (const [name, change, reason] of cases) {
    const facts =
      name === 'nothing yet' || name === 'invalid at start'
        ? (change as SyncFacts)
        : { ...synced, ...change };
    const status = agentStatus(facts, true);
    t.equal(status.ready, reason === null, `${name}: ready`);
    if (reason) t.match(status.notReadyReason, reason, `${name}: reason`);
    else t.equal(status.notReadyReason, null, `${name}: no reason`);
  }
});

t.test('the other fields are the facts, copied', async (t) => {
  const failed = agentStatus(
    { ...synced, kernel: 'failed', kernelError: 'x', lastError: 'x' },
    false,
  );
  t.equal(failed.lastWriteOk, false);
  t.equal(failed.alive, false);
  t.equal(failed.lastError, 'x');
  const ok = agentStatus(synced, true);
  t.same(
    { ...ok },
    {
      alive: true,
      lastWriteOk: true,
      generation: 3,
      configHash: 'a'.repeat(64),
      lastSyncTime: new Date(0),
      lastError: null,
      configError: null,
      waiting: null,
      nonMasqueradeCIDRs: { ipv4: 4, ipv6: 1 },
      ready: true,
      notReadyReason: null,
    },
  );
  t.not(ok.nonMasqueradeCIDRs, synced.counts, 'a copy: the server cannot change the facts');
});

t.test(
  'waiting for the API server: not ready, and why, with or without a ruleset applied',
  async (t) => {
    const waiting =
      'nonMasqueradeNodePodCIDRs: waiting for the first list of Nodes from the API server';
    const before = agentStatus({ ...initialFacts, waiting }, true);
    t.equal(before.ready, false);
    t.equal(before.notReadyReason, `nothing applied yet: ${waiting}`);
    const applied = agentStatus(
      { ...initialFacts, configHash: 'a'.repeat(64), kernel: 'in-sync', generation: 2, waiting },
      true,
    );
    t.equal(applied.ready, false);
    t.match(applied.notReadyReason, /keeps the last good ruleset while the config waits/);
    t.equal(applied.lastWriteOk, true, 'healthy all the same');
  },
);

t.test(
  'healthy (lastWriteOk) unless the last write failed: before any write, with an invalid config at start, not yet confirmed',
  async (t) => {
    const cases: Array<[string, SyncFacts, boolean]> = [
      ['before the first sync', initialFacts, true],
      [
        'an invalid config at start, nothing written',
        { ...initialFacts, configError: 'bad' },
        true,
      ],
      ['written, not yet confirmed', { ...synced, kernel: 'unverified' }, true],
      ['in sync', synced, true],
      ['the last write failed', { ...synced, kernel: 'failed', kernelError: 'EPERM' }, false],
    ];
    for (const [name, facts, healthy] of cases)
      t.equal(agentStatus(facts, true).lastWriteOk, healthy, name);
  },
);

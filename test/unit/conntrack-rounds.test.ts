// The rounds after a conntrack flush (src/reconcile/conntrack.ts): entries that late replies start
// the other way round are looked for again until a round finds none, at most REVERSE_ROUNDS times;
// the later flushes of the queue never wait for them.
import { pino } from 'pino';
import t from 'tap';
import type { Config } from '../../src/config/types.js';
import { ConntrackFlush, REVERSE_ROUNDS } from '../../src/reconcile/conntrack.js';
import { AgentMetrics } from '../../src/reconcile/metrics.js';
import { FakeKernel } from '../helpers/fake-kernel.js';

function config(ipv4: string[]): Config {
  return {
    nonMasquerade: { ipv4, ipv6: [] },
    masquerade: { ipv4: [], ipv6: [] },
    masqLinkLocal: false,
    masqLinkLocalIPv6: false,
    cidrLimit: 64,
    resyncIntervalMs: 60_000,
    hash: ipv4.join(),
    sources: [],
  };
}

/** A flush whose reverse rounds find `found(round)` entries. */
async function rounds(found: (round: number) => number) {
  const kernel = new FakeKernel();
  let round = 0;
  const flush = kernel.flushConntrack.bind(kernel);
  kernel.flushConntrack = async (family, protocols, ranges, directions) => {
    const result = await flush(family, protocols, ranges, directions);
    if (directions !== 'reverse') return result;
    round++;
    return { ...result, deleted: new Map(found(round) > 0 ? [[17, found(round)]] : []) };
  };
  const logs: Array<{ msg: string; round?: number }> = [];
  const flushes = new ConntrackFlush({
    kernel,
    mode: 'udp',
    enableIPv6: false,
    logger: pino({}, { write: (line: string) => logs.push(JSON.parse(line)) }),
    metrics: new AgentMetrics(),
    reverseIntervalMs: 1,
  });
  flushes.afterWrite(config(['10.0.0.0/8']), config(['10.0.0.0/9']), 2);
  await flushes.settled();
  return { kernel, logs };
}

t.test('rounds go on while they find entries, and end at the first that finds none', async (t) => {
  const { kernel, logs } = await rounds((round) => (round <= 2 ? 1 : 0));
  t.equal(kernel.flushes.length, 1, 'one flush');
  t.equal(kernel.rounds.length, 3, 'two rounds that found one, then one that found none');
  t.same(kernel.rounds[0]?.ranges, kernel.flushes[0]?.ranges, 'the ranges the flush had');
  t.same(
    logs.filter((l) => /late replies/.test(l.msg)).map((l) => l.round),
    [1, 2],
  );
});

t.test('at most REVERSE_ROUNDS rounds, however many they find', async (t) => {
  const { kernel } = await rounds(() => 1);
  t.equal(kernel.rounds.length, REVERSE_ROUNDS);
});

// The decision counters' series never go back (docs/observability.md, "What the node's NAT does"):
// a kernel count that falls (`nft reset counters`, counts lost around a whole write) adds its fall
// to the series' offset; nothing is invented; keys are apart. And only our decisions' counters
// become series.
import fc from 'fast-check';
import t from 'tap';
import { AgentMetrics, MonotonicCounts } from '../../../src/reconcile/metrics.js';

t.test('a falling count keeps the series where it was and counts on', async (t) => {
  const counts = new MonotonicCounts();
  t.equal(counts.of('a', 220), 220);
  t.equal(counts.of('a', 230), 230);
  t.equal(counts.of('a', 20), 230, 'reset: the series stays');
  t.equal(counts.of('a', 25), 235, 'and counts on by what the kernel counted since');
  t.equal(counts.of('a', 0), 235, 'again');
  t.equal(counts.of('a', 3), 238);
  t.equal(counts.of('b', 5), 5, 'each key its own');
  t.equal(counts.of('a', 3), 238, 'unchanged: unchanged');
});

t.test('for any reads: the series is the first read plus every rise, apart per key', async (t) => {
  // Whatever the kernel's counts do (rises, resets to 0, restores to an earlier value), the series
  // never goes back and counts exactly what was seen to rise: never more, so nothing is invented.
  const reads = fc.array(
    fc.tuple(fc.constantFrom('a', 'b', 'c'), fc.oneof(fc.nat(1_000), fc.constant(0))),
    { maxLength: 60 },
  );
  fc.assert(
    fc.property(reads, (sequence) => {
      const counts = new MonotonicCounts();
      const model = new Map<string, { raw: number; published: number }>();
      for (const [key, raw] of sequence) {
        const seen = model.get(key);
        const expected = seen ? seen.published + Math.max(0, raw - seen.raw) : raw;
        const published = counts.of(key, raw);
        if (published !== expected) return false;
        if (seen && published < seen.published) return false;
        model.set(key, { raw, published });
      }
      return true;
    }),
    { numRuns: 500 },
  );
  t.pass('500 sequences');
});

t.test('only translated, exempt and skipped become series; a fall never shows', async (t) => {
  const metrics = new AgentMetrics();
  let exempt = 120;
  metrics.decisions(
    async () => [
      {
        family: 'ipv4',
        counters: [
          { name: 'exempt', packets: exempt, bytes: 1 },
          { name: 'bogus', packets: 123456789, bytes: 1 },
          { name: 'pod-policy-0-translated', packets: 4, bytes: 1 },
          { name: 'pod-policy-0-bogus', packets: 9, bytes: 1 },
        ],
      },
    ],
    () => ['db'],
  );
  const series = async () =>
    (await metrics.exposition(0))
      .split('\n')
      .filter((line) => line.startsWith('ipmasq_flows_total{'))
      .sort();
  t.same(await series(), [
    'ipmasq_flows_total{family="ipv4",decision="exempt",policy=""} 120',
    'ipmasq_flows_total{family="ipv4",decision="translated",policy="db"} 4',
  ]);
  exempt = 20;
  // The kernel is read at most once a second.
  await new Promise((resolve) => setTimeout(resolve, 1_050));
  t.match((await series())[0], / 120$/, 'the kernel’s count fell: the series did not');
});

// The SNAT port sampler (src/reconcile/nat-sampler.ts): a complete sample is published, one past its
// CPU budget is not (the series keep the last complete one) and is said once; a sample that costs
// more than 2 % of one core over the interval spaces the next ones out, and that is said once.
import { pino } from 'pino';
import t from 'tap';
import type { Headroom } from '../../../src/nat-figures.js';
import type { Kernel } from '../../../src/kernel/ports.js';
import type { NatSample, NatSampleRequest } from '../../../src/kernel/conntrack.js';
import { NatSampler } from '../../../src/reconcile/nat-sampler.js';

function setup(samples: NatSample[]) {
  const logs: Array<{ level: number; msg: string }> = [];
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => void logs.push(JSON.parse(line) as { level: number; msg: string }) },
  );
  const asked: NatSampleRequest[] = [];
  const kernel = {
    natSample: async (request: NatSampleRequest) => {
      asked.push(request);
      const next = samples.shift();
      if (!next) throw new Error('no sample');
      return next;
    },
  } as unknown as Kernel;
  const published: Headroom[][] = [];
  const sampler = new NatSampler({
    kernel,
    logger,
    publish: (rows) => published.push([...rows]),
    intervalMs: 30_000,
    families: ['ipv4'],
    ports: 10,
  });
  return { sampler, logs, published, asked };
}

const sample = (over: Partial<NatSample>): NatSample => ({
  complete: true,
  seen: 100,
  translated: 10,
  cpuS: 0.01,
  protocols: [[17, 10, 8]],
  ...over,
});

t.test('complete samples published; one past its budget keeps the last, said once', async (t) => {
  const { sampler, logs, published, asked } = setup([
    sample({}),
    sample({ complete: false }),
    sample({ complete: false }),
    sample({ protocols: [[17, 10, 10]] }),
  ]);
  await sampler.sampleOnce();
  t.equal(published.length, 1);
  t.equal(published[0]!.find((r) => r.protocol === 'udp')?.usage, 0.8);
  t.match(asked[0], { family: 4, cpuBudgetS: 5, bySource: false });
  await sampler.sampleOnce();
  await sampler.sampleOnce();
  t.equal(published.length, 1, 'nothing published past the budget');
  t.equal(logs.filter((l) => /more than its 5 s of CPU/.test(l.msg)).length, 1, 'said once');
  await sampler.sampleOnce();
  t.equal(published.length, 2);
  t.equal(published[1]!.find((r) => r.protocol === 'udp')?.usage, 1);
  t.ok(logs.some((l) => /completes again/.test(l.msg)));
});

t.test('a costly sample spaces the next ones to keep 2 % of one core', async (t) => {
  const { sampler, logs } = setup([
    sample({ cpuS: 0.3 }),
    sample({ cpuS: 2.4 }),
    sample({ cpuS: 2.4 }),
    sample({ cpuS: 0.1 }),
  ]);
  await sampler.sampleOnce();
  t.equal(sampler.nextDelayMs(), 30_000, '0.3 s of CPU in 30 s: 1 %');
  await sampler.sampleOnce();
  t.equal(sampler.nextDelayMs(), 120_000, '2.4 s at 2 %: 120 s');
  await sampler.sampleOnce();
  t.equal(sampler.nextDelayMs(), 120_000);
  t.equal(logs.filter((l) => /wait longer/.test(l.msg)).length, 1, 'said once');
  await sampler.sampleOnce();
  t.equal(sampler.nextDelayMs(), 30_000);
  t.ok(logs.some((l) => /back to every/.test(l.msg)));
});

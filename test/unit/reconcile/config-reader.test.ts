// The config reader logs each warning once while it lasts, and a burst of new ones in a few lines
// (docs/hardening.md, round 3, item 8): a directory filling up file by file is read again at every
// change, each time with the warnings of every file so far.
import { pino } from 'pino';
import t from 'tap';
import { defaultConfig } from '../../../src/config/index.js';
import type { LoadResult } from '../../../src/config/types.js';
import { ConfigReader } from '../../../src/reconcile/config-reader.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';

const options = { enableIPv6: false, nomasqAllReservedRanges: false };

function reader() {
  const logs: Array<{ level: number; msg: string }> = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => logs.push(JSON.parse(line)) });
  let next: LoadResult = { ok: true, config: defaultConfig(options), warnings: [] };
  const configReader = new ConfigReader({
    configPath: '/cfg',
    loadOptions: options,
    load: async () => next,
    logger,
    metrics: new AgentMetrics(),
  });
  const warned = () => logs.filter((l) => l.level === 40).map((l) => l.msg);
  return {
    warned,
    read: async (warnings: string[]) => {
      next = { ok: true, config: defaultConfig(options), warnings };
      await configReader.read();
    },
  };
}

t.test('the same warnings at every resync are logged once', async (t) => {
  const r = reader();
  for (let i = 0; i < 5; i++) await r.read(['a', 'b']);
  t.same(r.warned(), ['a', 'b']);
});

t.test('a directory filling up logs each new warning once, not all of them again', async (t) => {
  const r = reader();
  const all: string[] = [];
  for (let i = 0; i < 200; i++) {
    all.push(`/cfg/ip-masq-${i}: unknown keys ignored: x`);
    await r.read([...all]);
  }
  t.equal(r.warned().length, 200, '200 files, 200 lines (was 20 100)');
  t.same(new Set(r.warned()).size, 200);
});

t.test('a burst of new warnings is cut to ten lines and a count', async (t) => {
  const r = reader();
  const burst = Array.from({ length: 500 }, (_, i) => `w${i}`);
  await r.read(burst);
  t.equal(r.warned().length, 11);
  t.equal(r.warned().at(-1), 'and 490 more config warnings (--check PATH lists them all)');
  await r.read(burst);
  t.equal(r.warned().length, 11, 'and not again');
});

t.test('a warning that went away and came back is logged again', async (t) => {
  const r = reader();
  await r.read(['a']);
  await r.read([]);
  await r.read(['a']);
  t.same(r.warned(), ['a', 'a']);
});

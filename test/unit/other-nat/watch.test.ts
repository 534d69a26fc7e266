// The other-NAT look's reports are escaped and bounded (docs/observability.md, "Other NAT on the
// node"; issue 51, item 5): table and chain names holding ESC, BEL or a newline appear escaped in
// the warning, the gauge's labels and the Event; no message passes MESSAGE_MAX; 305 translating
// chains make at most OTHER_NAT_SERIES_MAX series (the rest in table="(more)" with their rules'
// count) and WARNINGS_PER_LOOK warnings plus one that sums up the rest; when they go, as few lines.
import pino from 'pino';
import t from 'tap';
import type { Kernel } from '../../../src/kernel/ports.js';
import type { ChainInfo, RuleShape } from '../../../src/nftables/types.js';
import { AgentMetrics, OTHER_NAT_SERIES_MAX } from '../../../src/reconcile/metrics.js';
import { MESSAGE_MAX, OtherNatWatch, WARNINGS_PER_LOOK } from '../../../src/other-nat/watch.js';

/** Tables each with one nat postrouting base chain masquerading everything (a long rule apiece). */
function kernelWith(tables: string[], chain = (i: number) => `post${i}`) {
  const chains: ChainInfo[] = tables.map((table, i) => ({
    family: 'ip',
    table,
    name: chain(i),
    hook: { name: 'postrouting', priority: 110, type: 'nat' },
  }));
  const shape: RuleShape = { handle: 2, translates: true, jumps: [], expressions: ['masq'] };
  const long = `ip daddr != { ${Array.from({ length: 40 }, (_, i) => `198.18.${i}.0/24`).join(', ')} } masquerade`;
  return {
    chains,
    kernel: {
      chains: async () => chains,
      ruleShapes: async () => [shape],
      listRules: async (wanted: ReadonlyArray<{ table: string; chain: string }>) =>
        wanted
          .map(
            (w) => `table ip ${w.table} {\n\tchain ${w.chain} {\n\t\t${long} # handle 2\n\t}\n}\n`,
          )
          .join(''),
    } as unknown as Kernel,
  };
}

function watch(kernel: Kernel) {
  const logs: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => logs.push(JSON.parse(line)) });
  const metrics = new AgentMetrics();
  const events: Array<[string, string]> = [];
  const w = new OtherNatWatch({
    kernel,
    logger,
    metrics,
    events: (reason: string, message: string) => events.push([reason, message]),
    ours: () => false,
    readLegacyNat: async () => [],
    intervalMs: () => 60_000,
  });
  const series = async () =>
    (await metrics.exposition(0))
      .split('\n')
      .filter((l) => l.startsWith('ipmasq_other_nat_rules{'));
  return { w, logs, events, series };
}

t.test('names with control characters: escaped everywhere they are shown', async (t) => {
  const { kernel } = kernelWith(['evil\u001b[31m', 'bell\u0007', 'new\nline'], (i) =>
    i === 0 ? 'post\u0007' : `post${i}`,
  );
  const { w, logs, events, series } = watch(kernel);
  await w.look();
  const text = JSON.stringify({ logs, events, series: await series() });
  for (const raw of ['\u001b', '\u0007', '\nline'])
    t.notOk(
      logs.some((l) => String(l.msg).includes(raw) || String(l.table).includes(raw)) ||
        events.some(([, m]) => m.includes(raw)) ||
        (await series()).some((s) => s.includes(raw)),
      `no raw ${JSON.stringify(raw)}`,
    );
  t.match(text, /evil\\\\u001b\[31m/, 'ESC shown as \\u001b');
  const warned = logs.filter((l) => l.level === 40).map((l) => l.table);
  t.same(warned.sort(), ['ip bell\\u0007', 'ip evil\\u001b[31m', 'ip new\\u000aline'].sort());
  t.ok(
    (await series()).some((s) => s.includes('table="ip new\\\\u000aline"')),
    'the label as logged (the exposition escapes its backslash)',
  );
  for (const l of logs) t.ok(String(l.msg).length <= MESSAGE_MAX, `${String(l.msg).length} ≤ 512`);
  t.ok(events[0]![1].length <= MESSAGE_MAX, 'the Event bounded');
});

t.test('305 translating chains: bounded series and warnings, the rest summed up', async (t) => {
  const tables = Array.from({ length: 305 }, (_, i) => `mesh${i}`);
  const setup = kernelWith(tables);
  const { w, logs, events, series } = watch(setup.kernel);
  await w.look();
  const shown = await series();
  t.equal(shown.length, OTHER_NAT_SERIES_MAX, `${shown.length} series`);
  t.ok(
    shown.includes('ipmasq_other_nat_rules{table="(more)",chain="",position=""} 206'),
    'the 206 chains beyond 99 summed, one rule each',
  );
  const warnings = logs.filter((l) => l.level === 40);
  t.equal(warnings.length, WARNINGS_PER_LOOK + 1, 'ten warnings and one summing up');
  t.match(warnings.at(-1), { table: '(more)', chains: 295, translatingRules: 295 });
  for (const l of warnings) t.ok(String(l.msg).length <= MESSAGE_MAX);
  t.ok(
    warnings.every((l) => JSON.stringify(l.rules ?? []).length <= MESSAGE_MAX + 100),
    'each warning’s rules bounded together',
  );
  t.equal(events.length, 1, 'one Event');
  t.ok(events[0]![1].length <= MESSAGE_MAX);
  await w.look();
  t.equal(logs.length, warnings.length, 'nothing said again while unchanged');
  setup.chains.length = 0;
  await w.look();
  const gone = logs.slice(warnings.length);
  t.equal(gone.length, WARNINGS_PER_LOOK + 1, 'gone: ten lines and one summing up');
  t.same(await series(), [], 'no series left');
});

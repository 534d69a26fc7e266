// One mapping from flags to stage options serves every mode; --cleanup goes through the Kernel
// port.
import { pino } from 'pino';
import t from 'tap';
import { STAND_IN_COMMENT } from '../../src/nftables/ownership.js';
import { parseArgs } from '../../src/cli/flags.js';
import { plan } from '../../src/options.js';
import { cleanup } from '../../src/cli/cleanup.js';
import { FakeKernel } from '../helpers/fake-kernel.js';

function options(argv: string[]) {
  const parsed = parseArgs(argv, {});
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.options;
}

t.test('plan: each stage gets exactly the flags it consumes', async (t) => {
  const stages = plan(
    options([
      '--config=/c',
      '--enable-ipv6',
      '--nomasq-all-reserved-ranges',
      '--random-fully=false',
      '--to-ports=2000-3000',
      '--table=t1',
      '--masq-chain=C1',
      '--set-layout=concat',
      '--remove-legacy-chain',
      '--listen=127.0.0.1:1',
      '--node-name=n1',
    ]),
  );
  t.equal(stages.configPath, '/c');
  t.same(stages.load, {
    enableIPv6: true,
    nomasqAllReservedRanges: true,
    nodeName: 'n1',
    scoping: 'agent',
  });
  // The operator's commands describe a node rather than run on one (docs/egress-policy.md, "Egress
  // policy").
  t.equal(plan(options(['--explain', '10.0.0.1'])).load.scoping, 'describe');
  t.equal(plan(options(['--check', 'x'])).load.scoping, 'describe');
  t.equal(plan(options(['--once'])).load.scoping, 'agent');
  t.same(stages.compile, {
    table: 't1',
    masqChain: 'C1',
    randomFully: false,
    toPorts: [{ first: 2000, last: 3000 }],
    enableIPv6: true,
    setLayout: 'concat',
  });
  t.same(stages.legacy, { chains: ['C1', 'IP-MASQ'], remove: true });
  t.equal(stages.conntrackFlush, 'udp');
  t.equal(plan(options(['--conntrack-flush=none'])).conntrackFlush, 'none');
  t.same(plan(options([])).legacy.chains, ['IP-MASQ-AGENT', 'IP-MASQ']);
});

function logger() {
  const lines: Array<{ level: number; msg: string }> = [];
  return {
    lines,
    logger: pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l)) }),
  };
}

const ours = (family: string) =>
  `table ${family} ipmasq {\n\tcomment "ipmasq-agent generation 4 config sha256:${'0'.repeat(64)}"\n}\n`;

t.test(
  'cleanup deletes our tables, leaves a foreign one (exit 1) and removes the legacy chain',
  async (t) => {
    const kernel = new FakeKernel();
    kernel.tables.set('ip ipmasq', ours('ip'));
    kernel.tables.set('ip6 ipmasq', 'table ip6 ipmasq {\n}\n');
    kernel.legacy.set('IP-MASQ', 1);
    const { lines, logger: log } = logger();
    const legacy = { chains: ['IP-MASQ-AGENT', 'IP-MASQ'], remove: true };
    const code = await cleanup({ table: 'ipmasq', legacy, kernel, logger: log });
    t.equal(code, 1, 'a table that is not ours is an error');
    t.notOk(kernel.tables.has('ip ipmasq'), 'ours deleted');
    t.ok(kernel.tables.has('ip6 ipmasq'), 'the foreign one left');
    t.notOk(kernel.legacy.has('IP-MASQ'), 'the legacy chain removed');
    t.ok(lines.some((l) => /not deleted: the table is not ipmasq-agent's/.test(l.msg)));

    const again = new FakeKernel();
    again.tables.set('ip ipmasq', ours('ip'));
    again.legacy.set('IP-MASQ', 1);
    // A stand-in an interrupted upgrade left is ours; another's table of that name is not.
    again.tables.set(
      'ip ipmasq_upgrade',
      `table ip ipmasq_upgrade {\n\tcomment "${STAND_IN_COMMENT}"\n}\n`,
    );
    const theirs = 'table ip6 ipmasq_upgrade {\n\tcomment "mine"\n}\n';
    again.tables.set('ip6 ipmasq_upgrade', theirs);
    const keep = { ...legacy, remove: false };
    t.equal(await cleanup({ table: 'ipmasq', legacy: keep, kernel: again, logger: log }), 0);
    t.ok(again.legacy.has('IP-MASQ'), 'without --remove-legacy-chain the chain stays');
    t.same([...again.tables.keys()], ['ip6 ipmasq_upgrade'], 'ours gone, the stand-in too');
    t.equal(again.tables.get('ip6 ipmasq_upgrade'), theirs);
  },
);

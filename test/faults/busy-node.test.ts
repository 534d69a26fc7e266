// Beside a busy node (docs/writes.md, "Beside a busy node"): other tools commit to their own tables
// all the time — a writer committing 100 times a second, kube-proxy's shape (a table of a few
// hundred rules and sets rewritten by `nft -f` every second), a neighbour's 200 000-element set
// beside a rule writer — and the agent stays ready and healthy, its config edits reach the kernel
// as on a quiet node, and it reads its tables back at most once per resync: a read or a write is
// judged by what nftables' notifications say the other commits touched, and the periodic audit
// reads our tables over netlink, object by object, which no other commit restarts.
import { spawn } from 'node:child_process';
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot, type TapTest } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  metric,
  sleep,
  untilUp,
  writeConfig,
  type Node,
} from '../helpers/node.js';

// Five cases of about 20-30 s each: past tap's default 120 s on a saturated machine.
t.setTimeout(600_000);

const RESYNC_S = 3;

/** `count` non-adjacent /24s from 20.0.0.0, then `extra` non-adjacent /32s in 198.18.0.0/15. */
function configText(count: number, extra: number): string {
  const lines = ['nonMasqueradeCIDRs:'];
  for (let i = 0; i < count; i++) {
    const n = i * 2;
    lines.push(`  - ${20 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`);
  }
  for (let i = 0; i < extra; i++) lines.push(`  - 198.18.${2 * i}.1/32`);
  lines.push(`cidrLimit: ${count + extra + 10}`, `resyncInterval: ${RESYNC_S}s`, '');
  return lines.join('\n');
}

/** A kube-proxy-like table: a few hundred rules and a few sets, as one `nft -f` transaction. */
function kubeProxyTable(round: number): string {
  const lines = ['table ip kube-proxy', 'delete table ip kube-proxy', 'table ip kube-proxy {'];
  lines.push(
    '\tset cluster-ips {',
    '\t\ttype ipv4_addr',
    `\t\telements = { 10.96.0.${(round % 250) + 1} }`,
    '\t}',
  );
  lines.push('\tchain services {');
  for (let i = 0; i < 300; i++)
    lines.push(`\t\tip daddr 10.96.${i >> 8}.${i & 255} tcp dport ${80 + (round % 10)} accept`);
  lines.push('\t}', '}');
  return lines.join('\n') + '\n';
}

/** Another tool's steady commits; stops at teardown. Returns how many it made so far. */
interface Neighbour {
  readonly commits: () => number;
  stop(): void;
}

async function neighbour(t: TapTest, node: Node, shape: string): Promise<Neighbour> {
  let commits = 0;
  if (shape === 'kube-proxy') {
    let running = true;
    const loop = (async () => {
      while (running) {
        await inNetns(node.ns, 'nft', ['-f', '-'], { input: kubeProxyTable(commits) });
        commits++;
        await sleep(1_000);
      }
    })();
    const stop = () => (running = false);
    t.teardown(async () => {
      stop();
      await loop;
    });
    return { commits: () => commits, stop };
  }
  // One nft session committing a line at a time into its own table (`big set`: beside a set of
  // 200 000 elements, one rule a second).
  const big = shape === 'big set';
  const elements = big
    ? Array.from(
        { length: 200_000 },
        (_, i) => `11.${(i >> 14) & 255}.${(i >> 6) & 255}.${(i & 63) * 4}`,
      )
    : [];
  await inNetns(node.ns, 'nft', ['-f', '-'], {
    input: `table ip busy {\n set s {\n type ipv4_addr\n flags interval\n${big ? ` elements = { ${elements.join(', ')} }\n` : ''} }\n chain c {\n }\n}\n`,
    timeoutMs: 120_000,
  });
  const writer = spawn('ip', ['netns', 'exec', node.ns, 'nft', '-i'], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  writer.stdin.on('error', () => undefined);
  const ticker = setInterval(
    () => {
      const n = commits++;
      writer.stdin.write(
        big
          ? `add rule ip busy c ip daddr 10.${(n >> 8) & 255}.${n & 255}.1 accept\n`
          : `add element ip busy s { 10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255} }\n`,
      );
    },
    big ? 1_000 : 10,
  );
  const stop = () => {
    clearInterval(ticker);
    writer.kill('SIGKILL');
  };
  t.teardown(stop);
  return { commits: () => commits, stop };
}

const CASES: ReadonlyArray<{ size: number; shape: string; minCommits: number }> = [
  { size: 64, shape: '100 commits a second', minCommits: 800 },
  { size: 4_500, shape: '100 commits a second', minCommits: 800 },
  { size: 100_000, shape: '100 commits a second', minCommits: 800 },
  { size: 4_500, shape: 'kube-proxy', minCommits: 5 },
  { size: 4_500, shape: 'big set', minCommits: 5 },
];
const EDITS = 8;

if (requireRoot(t)) {
  for (const { size, shape, minCommits } of CASES) {
    t.test(`${size} CIDRs beside ${shape}`, async (t) => {
      const node = await makeNode(t, 'busy');
      writeConfig(node, configText(size, 0));
      const agent = startAgent(t, node.ns, agentArgs(node));
      await untilUp(node, agent);
      const health = async () =>
        JSON.parse((await httpGet(node.ns, node.port, '/healthz')).body) as { generation: number };
      const ready = async () => (await httpGet(node.ns, node.port, '/readyz')).status === 200;
      await waitFor(
        'generation 1',
        async () => ((await health()).generation >= 1 ? true : undefined),
        120_000,
      );
      await waitFor('ready', async () => ((await ready()) ? true : undefined), 60_000);
      const other = await neighbour(t, node, shape);
      await sleep(1_500);

      const reads = async () => (await metric(node, 'ipmasq_kernel_reads_total')) ?? 0;
      const readsBefore = await reads();
      const started = Date.now();
      // Probes as the kubelet makes them throughout; config edits one a second, then a quiet
      // stretch of resyncs (the periodic audit).
      const samples = { ready: 0, unready: 0, unhealthy: 0 };
      let probing = true;
      const prober = (async () => {
        while (probing) {
          samples[(await ready()) ? 'ready' : 'unready']++;
          if ((await httpGet(node.ns, node.port, '/healthz')).status !== 200) samples.unhealthy++;
          await sleep(100);
        }
      })();
      const latencies: number[] = [];
      for (let edit = 1; edit <= EDITS; edit++) {
        const before = (await health()).generation;
        const at = writeConfig(node, configText(size, edit));
        await waitFor(
          `edit ${edit} written`,
          async () => ((await health()).generation > before ? true : undefined),
          10_000,
          5,
        ).catch((err: Error) => {
          throw new Error(`${err.message}; agent log: ${JSON.stringify(agent.logs.slice(-6))}`);
        });
        latencies.push(Date.now() - at);
        await sleep(Math.max(0, 1_000 - latencies.at(-1)!));
      }
      await sleep(RESYNC_S * 2_000 + 500); // at least two periodic resyncs, each an audit
      probing = false;
      await prober;
      const seconds = (Date.now() - started) / 1000;
      const readBacks = (await reads()) - readsBefore;
      const commits = other.commits();
      other.stop();
      t.comment(
        `${commits} commits elsewhere; edits ${latencies.join(', ')} ms (to /healthz through a spawned client); probes ${JSON.stringify(samples)}; ${readBacks} reads in ${seconds.toFixed(1)} s`,
      );
      t.ok(commits >= minCommits, `the other tool committed ${commits} times`);
      t.equal(samples.unready, 0, `/readyz 200 in all ${samples.ready + samples.unready} samples`);
      t.equal(samples.unhealthy, 0, '/healthz never 503');
      t.ok(
        latencies.every((ms) => ms < 5_000),
        'every edit reached the kernel (the bench times them)',
      );
      // A read-back lists ip and ip6 (each counted), an audit counts once, and each element-only
      // write's audit reads the set it changed: at most one look a resync besides the edits'.
      const bound = 2 * (Math.ceil(seconds / RESYNC_S) + 1) + EDITS;
      t.ok(readBacks <= bound, `${readBacks} reads in ${seconds.toFixed(0)} s (≤ ${bound})`);
      t.equal(
        agent.logs.filter((l) => (l.level ?? 0) >= 50).length,
        0,
        `no error logged: ${JSON.stringify(agent.logs.filter((l) => (l.level ?? 0) >= 50).slice(0, 2))}`,
      );
      // Quiet again: the kernel holds the last edit.
      const { stdout } = await inNetns(node.ns, 'nft', ['list', 'set', 'ip', 'ipmasq', 'nonmasq'], {
        timeoutMs: 60_000,
      });
      t.match(
        stdout,
        new RegExp(`198\\.18\\.${2 * (EDITS - 1)}\\.1\\b`),
        'the last edit is in the kernel',
      );
    });
  }
}

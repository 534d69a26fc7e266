// The everyday edit beside a large neighbour (docs/writes.md, "The everyday edit"): another table's
// 200 000-element plain interval set, which libnftables downloads for every element command. A
// one-CIDR removal at 3 CIDRs (the default layout's plain interval sets), 1 500 (still interval: 2
// 000 and link-local cross to the concatenated layout) and 100 000 (concatenated sets) must go as a
// netlink element batch, never through libnftables, and leave the kernel holding the config. The
// time each took is printed, not judged (npm run bench judges it).
import t from 'tap';
import { startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  manyCidrsConfig,
  untilGeneration,
  untilUp,
  writeConfig,
  type Node,
} from '../helpers/node.js';

/** The prefixes of our nonmasq set, of either layout (a concatenated element's address part). */
async function prefixes(node: Node): Promise<string[]> {
  const { stdout } = await inNetns(
    node.ns,
    'nft',
    ['-j', 'list', 'set', 'ip', 'ipmasq', 'nonmasq'],
    {
      timeoutMs: 60_000,
    },
  );
  type Prefix = { prefix?: { addr: string; len: number } };
  const parsed = JSON.parse(stdout) as { nftables: Array<{ set?: { elem?: unknown[] } }> };
  const elems = parsed.nftables.find((item) => item.set)?.set?.elem ?? [];
  return elems.map((e) => {
    const part = ((e as { concat?: unknown[] }).concat?.[0] ?? e) as Prefix | string;
    if (typeof part === 'string') return `${part}/32`;
    return part.prefix ? `${part.prefix.addr}/${part.prefix.len}` : JSON.stringify(e);
  });
}

const NEIGHBOUR = 200_000;

/** A table of another tool with one interval set of `count` /32s, none adjoining. */
function neighbourScript(count: number): string {
  const elements: string[] = [];
  for (let i = 0; i < count; i++) {
    const n = (172 << 24) + 16 * 65536 + i * 2;
    elements.push(`${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`);
  }
  return `table ip neighbour {\n  set big {\n    type ipv4_addr; flags interval;\n    elements = { ${elements.join(', ')} }\n  }\n}\n`;
}

if (requireRoot(t)) {
  t.setTimeout(600_000);
  const node = await makeNode(t, 'neighbour');
  await inNetns(node.ns, 'nft', ['-f', '-'], { input: neighbourScript(NEIGHBOUR) });

  for (const size of [3, 1_500, 100_000]) {
    t.test(`${size} CIDRs beside a ${NEIGHBOUR}-element interval set`, async (t) => {
      const full = manyCidrsConfig(size, '1h');
      writeConfig(node, full);
      const agent = startAgent(t, node.ns, agentArgs(node));
      t.teardown(async () => {
        agent.child.kill('SIGKILL');
        await agent.exited;
        await inNetns(node.ns, 'nft', ['delete', 'table', 'ip', 'ipmasq']).catch(() => undefined);
      });
      await untilUp(node, agent);
      await untilGeneration(node, 1, 120_000);
      // The last item line removed.
      const lines = full.split('\n');
      const last = lines.findLastIndex((line) => line.startsWith('  - '));
      const gone = (lines[last] as string).slice(4);
      writeConfig(node, [...lines.slice(0, last), ...lines.slice(last + 1)].join('\n'));
      await untilGeneration(node, 2, 60_000);
      const line = await waitFor('the write logged', () =>
        agent.logs.find((l) => l.msg === 'ruleset written to the kernel' && l.generation === 2),
      );
      t.equal(line.via, 'netlink', 'written as a netlink element batch');
      t.comment(
        `${size}: the write took ${String(line.durationMs)} ms (apply ${String(line.applyMs)} ms)`,
      );
      const held = await prefixes(node);
      t.notOk(held.includes(gone), `${gone} is gone from the set`);
      t.equal(held.filter((e) => e !== '169.254.0.0/16').length, size - 1, 'the rest stays');
    });
  }
}

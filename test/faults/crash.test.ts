// kill -9 in the middle of a 100 000-CIDR write (README, "What it does": one transaction, old or
// new, never a mix), then a restart that converges. The kill is timed from outside: each call of the
// write opens a netlink socket of its own — libnftables in a process forked per call (killed with
// the agent), or the agent's own batch filling a large new set (docs/design.md, "Writes on the
// wire") — while the sockets open before the config changed (the agent's notifications) are left
// out, and the write is the first one after a config change that stays open for long
// (generation-id reads take microseconds), so a kill 50–250 ms into it lands mid-write.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import t from 'tap';
import { httpGet, listTable, startAgent, waitFor, type RunningAgent } from '../../harness/agent.js';
import { requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  isRunning,
  processAndChildren,
  generation,
  makeNode,
  manyCidrsConfig,
  setElements,
  sleep,
  untilUp,
  writeConfig,
  type Node,
} from '../helpers/node.js';

const OLD = 1_000;
const NEW = 100_000;
// How long into the write each kill comes: early, middle, late (a write takes about 0.55 s here).
const KILL_AFTER_MS = [50, 150, 250];

/** The sockets of the agent and its children (its libnftables processes). */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const member of processAndChildren(pid)) {
    try {
      for (const fd of readdirSync(`/proc/${member}/fd`)) {
        const target = readlinkSync(`/proc/${member}/fd/${fd}`);
        const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
        if (inode) inodes.add(inode);
      }
    } catch {
      // closed or exited meanwhile
    }
  }
  return inodes;
}

/** Netlink socket inodes of the namespace the process is in. */
function netlinkInodes(pid: number): Set<string> {
  const lines = readFileSync(`/proc/${pid}/net/netlink`, 'utf8').trim().split('\n').slice(1);
  return new Set(lines.map((line) => line.trim().split(/\s+/).at(-1) as string));
}

/**
 * Waits for a netlink socket of the agent's, not among `before` (open before the config changed:
 * its notifications' socket, open all along, is no write), that has been open `heldMs`; returns its
 * age then.
 */
async function untilLongNetlinkCall(
  pid: number,
  before: ReadonlySet<string>,
  heldMs: number,
  timeoutMs: number,
): Promise<number> {
  const firstSeen = new Map<string, number>();
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const now = Date.now();
    const open = socketInodes(pid);
    const netlink = netlinkInodes(pid);
    for (const inode of open) {
      if (!netlink.has(inode) || before.has(inode)) continue;
      const since = firstSeen.get(inode) ?? now;
      firstSeen.set(inode, since);
      if (now - since >= heldMs) return now - since;
    }
    for (const inode of firstSeen.keys()) if (!open.has(inode)) firstSeen.delete(inode);
    await sleep(5);
  }
  throw new Error(`no netlink call held for ${heldMs} ms within ${timeoutMs} ms`);
}

/** Elements in our nonmasq set; -1 while there is no table yet. */
async function elementCount(node: Node): Promise<number> {
  return (await setElements(node, 'nonmasq').catch(() => null))?.length ?? -1;
}

if (requireRoot(t)) {
  const root = t;
  const node = await makeNode(t, 'crash');
  const oldConfig = manyCidrsConfig(OLD);
  const newConfig = manyCidrsConfig(NEW);
  // The configured /24s are not adjacent, and 169.254.0.0/16 joins them.
  const oldCount = OLD + 1;
  const newCount = NEW + 1;

  let agent: RunningAgent | undefined;
  async function startWith(config: string, expectedCount: number): Promise<void> {
    writeConfig(node, config);
    agent = startAgent(root, node.ns, agentArgs(node));
    await untilUp(node);
    await waitFor(
      'the expected set',
      async () => ((await elementCount(node)) === expectedCount ? true : undefined),
      30_000,
      200,
    );
    // Ready: the restarted agent has converged (`/readyz`, docs/design.md), so a write it
    // makes to clear what a killed one left (a temporary set) is behind us before the next attempt
    // takes the table's mark.
    await waitFor(
      'ready',
      async () =>
        (await httpGet(node.ns, node.port, '/readyz')).status === 200 ? true : undefined,
      30_000,
      100,
    );
    const leftovers = ((await listTable(node.ns, 'ip')) ?? '').match(/set \S+-next /g) ?? [];
    root.same(leftovers, [], 'no temporary set left once ready');
  }

  await startWith(oldConfig, oldCount);

  t.test(
    `kill -9 during the write: the kernel holds ${oldCount} or ${newCount} elements, never between`,
    async (t) => {
      const outcomes: string[] = [];
      for (const [attempt, heldMs] of KILL_AFTER_MS.entries()) {
        const running = agent as RunningAgent;
        const pid = running.child.pid as number;
        const before = await generation(node);
        const open = socketInodes(pid);
        writeConfig(node, newConfig);
        const age = await untilLongNetlinkCall(pid, open, heldMs, 15_000);
        const libnftablesProcesses = processAndChildren(pid).slice(1);
        running.child.kill('SIGKILL');
        await running.exited;
        // An orphan could commit its stale script after a restarted agent wrote a newer one.
        await waitFor(
          'the libnftables process to die with the agent',
          () => (libnftablesProcesses.every((child) => !isRunning(child)) ? true : undefined),
          150,
          10,
        );
        const count = await elementCount(node);
        const after = await generation(node);
        const outcome = count === oldCount ? 'old' : count === newCount ? 'new' : `PART (${count})`;
        outcomes.push(outcome);
        t.ok(
          count === oldCount || count === newCount,
          `attempt ${attempt + 1}: killed ${age} ms into a netlink call; ${outcome}`,
        );
        t.equal(
          after,
          outcome === 'old' ? before : (before ?? 0) + 1,
          'the comment matches the contents',
        );
        await startWith(oldConfig, oldCount); // back to the old state for the next attempt
      }
      t.comment(`outcomes: ${outcomes.join(', ')}`);
      t.ok(outcomes.includes('old'), 'at least one kill landed before the commit');
    },
  );

  t.test('a restart after the kill converges to the new config', async (t) => {
    const running = agent as RunningAgent;
    const before = (await generation(node)) ?? 0;
    const open = socketInodes(running.child.pid as number);
    writeConfig(node, newConfig);
    await untilLongNetlinkCall(running.child.pid as number, open, 100, 15_000);
    running.child.kill('SIGKILL');
    await running.exited;
    agent = startAgent(root, node.ns, agentArgs(node));
    await untilUp(node);
    await waitFor(
      'the new set',
      async () => ((await elementCount(node)) === newCount ? true : undefined),
      30_000,
      250,
    );
    t.equal(await generation(node), before + 1, 'one write by the restarted agent');
    const health = await waitFor(
      'healthy and ready',
      async () => {
        const r = await httpGet(node.ns, node.port, '/readyz');
        return r.status === 200 ? r : undefined;
      },
      15_000,
      200,
    );
    t.equal(health.status, 200);
  });
}

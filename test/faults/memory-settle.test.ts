// Memory after a large config (docs/hardening.md, round 3, item 7): once the agent is back on a
// small config its RSS comes back near the idle figure, rather than keeping what 100 000 CIDRs left
// in V8's heap (an idle agent allocates too little for V8 to collect), in glibc's arenas (whose
// threshold for mapping a block of its own had risen to the largest block freed) and in the
// program's code that the large config's work ran. The agent runs from its own copy of node, as in
// its container: the kernel leaves alone pages that the test's node maps too.
import t from 'tap';
import { copyOfNode, startAgent, waitFor } from '../../harness/agent.js';
import { requireRoot, tempDir } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  manyCidrsConfig,
  processStats,
  type ProcessStats,
  sleep,
  untilUp,
  writeConfig,
} from '../helpers/node.js';

/**
 * The round's goal: back within 5 MiB of the idle figure within a minute. Before the fix the agent
 * stayed 25–65 MiB above idle after a sequence of large writes and took about a minute to come back
 * from one; with V8's and glibc's garbage gone (HeapTidier, mapLargeAllocations) it still held 5–7 MiB
 * of the program's code that the large config's work ran, until it handed those pages back
 * (pageOutFileMappings).
 */
const SETTLED_WITHIN_KIB = 5 * 1024;
const SETTLE_MS = 60_000;
const SMALL = manyCidrsConfig(64);

if (requireRoot(t)) {
  t.test('back on a small config, RSS returns near the idle figure', async (t) => {
    const node = await makeNode(t, 'memory');
    writeConfig(node, SMALL);
    const agent = startAgent(t, node.ns, agentArgs(node), [], copyOfNode(tempDir(t, 'node')));
    const writes = () => agent.logs.filter((l) => l.msg === 'ruleset written to the kernel');
    const untilWrites = (n: number) =>
      waitFor(`write ${n}`, () => (writes().length >= n ? true : undefined), 60_000);
    await untilWrites(1);
    await untilUp(node);
    const pid = agent.child.pid as number;
    // The idle figure once start-up's work is over (the bench's idle is taken the same way).
    await sleep(3_000);
    const idle = processStats(pid);

    writeConfig(node, manyCidrsConfig(100_000));
    await untilWrites(2);
    const large = processStats(pid).rssKiB;
    writeConfig(node, SMALL);
    await untilWrites(3);
    t.ok(
      large > idle.rssKiB + 3 * SETTLED_WITHIN_KIB,
      `100 000 CIDRs took room: ${idle.rssKiB} -> ${large} KiB`,
    );

    // Settled: RSS near idle, and the program's pages handed back — fewer file pages resident than
    // at idle (start-up's code goes with the large config's).
    const settles = (now: ProcessStats) =>
      now.rssKiB <= idle.rssKiB + SETTLED_WITHIN_KIB && now.rssFileKiB < idle.rssFileKiB;
    let last = processStats(pid);
    await waitFor(
      'RSS back near idle',
      () => {
        last = processStats(pid);
        return settles(last) ? true : undefined;
      },
      SETTLE_MS,
      500,
    ).catch(() => undefined);
    const within = `within ${SETTLE_MS / 1000} s`;
    t.ok(
      last.rssKiB <= idle.rssKiB + SETTLED_WITHIN_KIB,
      `${within}, RSS within ${SETTLED_WITHIN_KIB} KiB of idle: ${idle.rssKiB} -> ${last.rssKiB} KiB`,
    );
    t.ok(
      last.rssFileKiB < idle.rssFileKiB,
      `${within}, fewer file pages than idle: ${idle.rssFileKiB} -> ${last.rssFileKiB} KiB`,
    );
    t.equal(agent.child.exitCode, null, 'still running');
  });
}

// 500 config writes in 5 s (docs/writes.md, "When it writes": applied within 1 s of the write): the
// kernel ends with the last one within 1 s of the last write, and the agent holds no more fds or
// memory after.
import t from 'tap';
import { startAgent } from '../../harness/agent.js';
import { requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  processStats,
  setElements,
  sleep,
  untilGeneration,
  untilUp,
  writeConfig,
  type Node,
} from '../helpers/node.js';

const WRITES = 500;
const WINDOW_MS = 5_000;
const configNumber = (i: number) =>
  `nonMasqueradeCIDRs: [10.0.0.0/8, 11.${i >> 8}.${i & 255}.0/24]\nresyncInterval: 60s\n`;

/** Writes `count` configs spread over windowMs; returns the time of the last write. */
async function churn(node: Node, count: number, windowMs: number): Promise<number> {
  const started = Date.now();
  let last = 0;
  for (let i = 0; i < count; i++) {
    last = writeConfig(node, configNumber(i));
    const due = started + ((i + 1) * windowMs) / count;
    if (due > Date.now()) await sleep(due - Date.now());
  }
  return last;
}

if (requireRoot(t)) {
  const node = await makeNode(t, 'churn');
  writeConfig(node, configNumber(0));
  const agent = startAgent(t, node.ns, agentArgs(node));
  await untilGeneration(node, 1, 10_000);
  await untilUp(node);
  const pid = agent.child.pid as number;

  t.test(
    `${WRITES} writes in ${WINDOW_MS / 1000} s: the last lands within 1 s; no fd or memory growth`,
    async (t) => {
      // A first round warms up the JIT and the heap, so the second measures growth, not start-up.
      await churn(node, 100, 1_000);
      await sleep(1_000);
      const before = processStats(pid);
      const lastWrite = await churn(node, WRITES, WINDOW_MS);
      const wanted = [
        '10.0.0.0/8',
        `11.${(WRITES - 1) >> 8}.${(WRITES - 1) & 255}.0/24`,
        '169.254.0.0/16',
      ];
      let landed = 0;
      while (Date.now() - lastWrite < 3_000) {
        if ((await setElements(node, 'nonmasq')).join() === wanted.join()) {
          landed = Date.now();
          break;
        }
        await sleep(20);
      }
      t.ok(
        landed > 0 && landed - lastWrite <= 1_000,
        `the last config in the kernel ${landed - lastWrite} ms after the last write`,
      );
      await sleep(1_500);
      const after = processStats(pid);
      t.comment(`fds ${before.fds} -> ${after.fds}; VmRSS ${before.rssKiB} -> ${after.rssKiB} KiB`);
      t.ok(after.fds <= before.fds + 2, `fds ${before.fds} -> ${after.fds}`);
      t.ok(
        after.rssKiB - before.rssKiB <= 20_000,
        `VmRSS grew ${after.rssKiB - before.rssKiB} KiB`,
      );
      const applied = agent.logs.filter((l) => l.msg === 'ruleset written to the kernel').length;
      t.comment(`${applied} kernel writes logged for ${WRITES + 100} config writes (coalesced)`);
      t.equal(agent.child.exitCode, null, 'still running');
    },
  );
}

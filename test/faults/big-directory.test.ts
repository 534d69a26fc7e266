// A config directory of 10 000 ip-masq* files (docs/hardening.md, round 3, item 8): refused with
// one error however it fills up, each warning logged once, and cheap to look at while it stays:
// the files beyond the limit are never opened or stat'ed at a resync, and a directory whose own
// metadata did not move is not listed again.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { requireRoot } from '../../harness/netns.js';
import {
  generation,
  makeNode,
  metric,
  untilGeneration,
  untilUp,
  type Node,
} from '../helpers/node.js';

/** Every resync the agent made, whatever its result. */
async function syncs(node: Node): Promise<number> {
  let total = 0;
  for (const result of ['applied', 'unchanged', 'error'])
    total += (await metric(node, `ipmasq_syncs_total{result="${result}"}`)) ?? 0;
  return total;
}

if (requireRoot(t)) {
  t.test(
    '10 000 files: one error, each warning once, an idle resync that lists nothing',
    async (t) => {
      const node = await makeNode(t, 'bigdir');
      const dir = join(node.dir, 'config.d');
      mkdirSync(dir);
      writeFileSync(
        join(dir, 'ip-masq-agent'),
        'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n',
      );
      const agent = startAgent(t, node.ns, ['--config', dir, '--listen', `127.0.0.1:${node.port}`]);
      await untilGeneration(node, 1, 10_000);
      await untilUp(node);
      // Each file carries an unknown key: a warning of its own. The first 100 come five at a time,
      // each batch read by the agent (its last warning logged) before the next: a directory filling up.
      const file = (i: number) => join(dir, `ip-masq-${String(i).padStart(5, '0')}`);
      for (let i = 0; i < 100; i++) {
        writeFileSync(file(i), `x${i}: 1\n`);
        if (i % 5 !== 4) continue;
        await waitFor(`the warning of file ${i}`, async () =>
          agent.logs.some((l) => String(l.msg).includes(`${file(i)}: unknown keys ignored: x${i}`))
            ? true
            : undefined,
        );
      }
      for (let i = 100; i < 10_000; i++) writeFileSync(file(i), `x${i}: 1\n`);
      const healthz = await waitFor(
        'the directory refused',
        async () => {
          const r = await httpGet(node.ns, node.port, '/healthz');
          const body = JSON.parse(r.body) as { configError: string | null };
          return body.configError?.includes('more than 1000') ? body : undefined;
        },
        30_000,
      );
      t.match(healthz.configError, /config\.d: holds more than 1000 ip-masq\* files \(the limit\)/);
      // Idle while the directory stays as it is: resyncs that list it at most once and read none
      // of its files (the CPU this costs is a bench row: docs/bench.md, "Goals").
      const listing = 'ipmasq_config_reads_total{what="listing"}';
      const files = 'ipmasq_config_reads_total{what="files"}';
      // Settled: the directory's last change a second old (src/config/source.ts).
      await new Promise((r) => setTimeout(r, 1_500));
      const before = {
        syncs: await syncs(node),
        listings: await metric(node, listing),
        reads: await metric(node, files),
      };
      await waitFor(
        'five idle resyncs',
        async () => ((await syncs(node)) >= before.syncs + 5 ? true : undefined),
        30_000,
      );
      const listings = (await metric(node, listing))! - before.listings!;
      t.ok(
        listings <= 1,
        `five idle resyncs listed the directory ${listings} times (at most once)`,
      );
      t.equal((await metric(node, files))! - before.reads!, 0, 'and read none of its files');
      const errors = agent.logs.filter(
        (l) => l.level === 50 && /more than 1000/.test(String(l.msg)),
      );
      t.equal(errors.length, 1, 'the limit is one error, logged once');
      const warnings = agent.logs.filter((l) => l.level === 40).map((l) => String(l.msg));
      const ofFirst100 = (i: number) => warnings.filter((w) => w.startsWith(`${file(i)}:`));
      t.ok(
        Array.from({ length: 100 }, (_, i) => ofFirst100(i).length).every((n) => n === 1),
        'each of the first 100 files, read as they came, warned exactly once',
      );
      t.equal(new Set(warnings).size, warnings.length, 'no warning logged twice');
      // While the other 9 900 were written the agent may have read the directory again below the
      // limit: each file there warns at most once (above), a burst beyond ten as one counting line.
      const counted = warnings.filter((w) => / more config warnings /.test(w)).length;
      t.ok(
        warnings.length - counted <= 1_000,
        `${warnings.length} warning lines, ${counted} of them counting a burst (was 25 685)`,
      );
      t.equal(await generation(node), 1, 'nothing written: the last good config stays');
      // Back under the limit: read again and applied.
      for (const name of readdirSync(dir)) if (name !== 'ip-masq-agent') rmSync(join(dir, name));
      writeFileSync(
        join(dir, 'ip-masq-agent'),
        'nonMasqueradeCIDRs: [10.1.0.0/16]\nresyncInterval: 1s\n',
      );
      await untilGeneration(node, 2, 10_000);
      t.pass('valid again once the directory is small');
    },
  );
}

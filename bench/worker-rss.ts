// What the agent's config worker thread (dist/config/load-worker.js, when the build has one) adds to
// RSS: a fresh node process loads the module, then RSS is read before and after its first load.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { agentEnv } from '../harness/agent.js';
import { packageRoot } from '../harness/netns.js';
import { tempDir, withScope } from './harness.js';
import { configText } from './scripts.js';

const workerModule = join(packageRoot, 'dist', 'config', 'load-worker.js');
const sourceModule = join(packageRoot, 'dist', 'config', 'source.js');

const PROBE = `
const [moduleUrl, sourceUrl, file] = process.argv.slice(2);
const { loadSourceOffThread } = await import(moduleUrl);
const { findConfigSource } = await import(sourceUrl);
const settle = () => new Promise((r) => setTimeout(r, 1000));
await settle();
const before = process.memoryUsage().rss;
const options = { enableIPv6: false, nomasqAllReservedRanges: false };
const result = await loadSourceOffThread(await findConfigSource(file), options);
if (!result.ok) throw result.error;
await settle();
console.log(JSON.stringify({ before, after: process.memoryUsage().rss }));
process.exit(0);
`;

/** MiB of RSS the worker adds at a 64-CIDR config, or undefined when the build loads on the main thread. */
export async function workerRssMiB(): Promise<number | undefined> {
  if (!existsSync(workerModule)) return undefined;
  return withScope(async (scope) => {
    const dir = await tempDir(scope);
    const file = join(dir, 'ip-masq-agent');
    const probe = join(dir, 'probe.mjs');
    await writeFile(file, configText(64));
    await writeFile(probe, PROBE);
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [probe, pathToFileURL(workerModule).href, pathToFileURL(sourceModule).href, file],
        { timeout: 30_000, env: agentEnv() },
        (err, out, stderr) => (err ? reject(new Error(stderr || err.message)) : resolve(out)),
      );
    });
    const { before, after } = JSON.parse(stdout) as { before: number; after: number };
    return (after - before) / 2 ** 20;
  });
}

// Nothing in src/ reads a switch for a test (docs/design.md, "Tests"): a test's fault or timing
// comes in through the agent's parts (src/agent.ts, AgentParts; harness/agent-with-parts.js). The
// environment is read where an operator or the image sets it, in the files listed here, and each
// IPMASQ_ variable the agent reads is one the docs (or the image's launcher) name.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';

const src = join(packageRoot, 'src');

/** Where src/ reads the environment, and why an operator or the image sets what it reads. */
const READERS: Record<string, string> = {
  'signals.ts': "the image's launcher's pipe (native/launch.c) and NODE_OPTIONS' --inspect",
  'kernel/addon.ts': "IPMASQ_NFT_TIMEOUT_MS, a libnftables call's time limit",
  'kubernetes/connection.ts': "the pod's in-cluster API address, KUBECONFIG",
  'cli/flags.ts': "the flags' environment fallbacks (the original's NODE_NAME and the like)",
};

const texts = new Map(srcModules().map((name) => [name, readFileSync(join(src, name), 'utf8')]));

t.test('the environment is read only where an operator or the image sets it', async (t) => {
  const readers = [...texts].filter(([, text]) => text.includes('process.env')).map(([n]) => n);
  t.ok(readers.length > 0, 'some module reads it (the scan finds process.env)');
  for (const name of readers) t.ok(name in READERS, `${name} reads process.env`);
  for (const name of Object.keys(READERS))
    t.ok(readers.includes(name), `${name} still reads it (else it leaves the list)`);
});

t.test('no test switch in src/', async (t) => {
  for (const [name, text] of texts) t.notMatch(text, /IPMASQ_TEST/, `${name} names none`);
});

t.test('each IPMASQ_ variable read is named in the docs or by the launcher', async (t) => {
  const docs = [
    readFileSync(join(packageRoot, 'README.md'), 'utf8'),
    ...readdirSync(join(packageRoot, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => readFileSync(join(packageRoot, 'docs', f), 'utf8')),
    readFileSync(join(packageRoot, 'native', 'launch.c'), 'utf8'),
  ].join('\n');
  const read = new Set<string>();
  for (const text of texts.values())
    for (const m of text.matchAll(/env\.(IPMASQ_[A-Z0-9_]+)/g)) read.add(m[1]!);
  t.ok(read.has('IPMASQ_NFT_TIMEOUT_MS'), 'the scan finds the variables read');
  for (const name of read) t.ok(docs.includes(name), `${name} is documented`);
});

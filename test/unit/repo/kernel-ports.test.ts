// Each module takes the rooms of the Kernel port it uses (docs/design.md, "Data flow"): our tables
// (TablesPort), everyone else's (OthersPort), the original's chain (LegacyPort), conntrack
// (ConntrackPort), or the two it needs; only the modules that hand each part its port take the
// whole Kernel. The type checker keeps a port wide enough; this keeps it from being wider.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';

const src = join(packageRoot, 'src');

/** The modules that build the parts and give each its port. */
const COMPOSERS = ['agent.ts', 'reconcile/reconciler.ts'];

/** The text without comments (line and block), so that a sentence naming the port is not a use. */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1');
}

t.test('only the composers take the whole Kernel', async (t) => {
  const takers = srcModules()
    .filter((name) => !['kernel/ports.ts', 'kernel/kernel.ts'].includes(name))
    .filter((name) => /(?<![\w.])Kernel\b/.test(code(readFileSync(join(src, name), 'utf8'))));
  t.same(takers.sort(), [...COMPOSERS].sort());
});

t.test('the modules that use a room name its port', async (t) => {
  const uses = (name: string, port: string) =>
    new RegExp(`\\b${port}\\b`).test(code(readFileSync(join(src, name), 'utf8')));
  // Spot checks that the scan above reads what it means to: each room has its takers.
  t.ok(uses('reconcile/conntrack.ts', 'ConntrackPort'), 'the flush: conntrack');
  t.ok(uses('other-nat/legacy.ts', 'LegacyPort'), "the original's chain: its own room");
  t.notOk(uses('other-nat/legacy.ts', 'OthersPort'), "the original's chain: not everyone else's");
  t.ok(uses('reconcile/read-back.ts', 'TablesPort'), 'the read-back: our tables');
});

/** Each room's methods, as `ports.ts` declares them. */
function declared(ports: string): Map<string, string[]> {
  const rooms = new Map<string, string[]>();
  for (const m of ports.matchAll(/^export interface (\w+Port) \{\n([\s\S]*?)^\}/gm)) {
    const members = [...code(m[2]!).matchAll(/^ {2}(\w+)\(/gm)].map((n) => n[1]!);
    rooms.set(m[1]!, members.sort());
  }
  return rooms;
}

/** Each room's methods, as docs/design.md lists them ("Data flow": one bullet a room). */
function listed(design: string): Map<string, string[]> {
  const rooms = new Map<string, string[]>();
  for (const m of design.matchAll(/^- `(\w+Port)`[^:]*:([\s\S]*?)(?=^- `|^\n)/gm)) {
    // A parenthesis says what a method is for, and may name a flag or another thing in backticks.
    const bare = m[2]!.replace(/\([^)]*\)/g, '');
    rooms.set(m[1]!, [...bare.matchAll(/`(\w+)`/g)].map((n) => n[1]!).sort());
  }
  return rooms;
}

t.test("docs/design.md lists each room's methods as ports.ts declares them", async (t) => {
  const ports = declared(readFileSync(join(src, 'kernel', 'ports.ts'), 'utf8'));
  const design = listed(readFileSync(join(src, '..', 'docs', 'design.md'), 'utf8'));
  t.same([...ports.keys()].sort(), ['ConntrackPort', 'LegacyPort', 'OthersPort', 'TablesPort']);
  t.ok(ports.get('TablesPort')!.includes('apply'), 'the reader finds the methods');
  t.same(Object.fromEntries(design), Object.fromEntries(ports), 'one bullet a room, every method');
});

// No function in src/ over 80 lines but those listed here, each no longer than it is listed at: a
// ratchet, until the list is empty. A function that shrinks under the bound leaves the list (a name
// listed and not found long fails too, so the list cannot go stale).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';

const src = join(packageRoot, 'src');
const BOUND = 80;

/** file:function → its length now, the most it may be. */
const LONG: Record<string, number> = {};

/**
 * Every function over the bound, by file and name; a function without a name of its own (an arrow
 * given as an argument, say) counts as the named one it is written in, so one long body is one entry.
 */
function longFunctions(): Map<string, number> {
  const found = new Map<string, number>();
  for (const name of srcModules()) {
    const text = readFileSync(join(src, name), 'utf8');
    const file = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node, outer: string | undefined) => {
      let named = outer;
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const own =
          node.name && (ts.isIdentifier(node.name) || ts.isPrivateIdentifier(node.name))
            ? node.name.text
            : ts.isConstructorDeclaration(node)
              ? 'constructor'
              : undefined;
        named = own ?? outer ?? '(anonymous)';
        const start = file.getLineAndCharacterOfPosition(node.getStart()).line;
        const end = file.getLineAndCharacterOfPosition(node.end).line;
        const lines = end - start + 1;
        const key = `${name}:${named}`;
        if (lines > BOUND) found.set(key, Math.max(found.get(key) ?? 0, lines));
      }
      ts.forEachChild(node, (child) => visit(child, named));
    };
    visit(file, undefined);
  }
  return found;
}

t.test('no function over 80 lines but those listed, none longer than listed', async (t) => {
  const found = longFunctions();
  t.ok(found.size > 0 || Object.keys(LONG).length === 0, 'the scan finds the listed ones');
  for (const [key, lines] of found) {
    const most = LONG[key];
    t.ok(most !== undefined, `${key} is ${lines} lines: over ${BOUND}, and not listed`);
    if (most !== undefined) t.ok(lines <= most, `${key}: ${lines} lines, listed at ${most}`);
  }
  for (const key of Object.keys(LONG))
    t.ok(found.has(key), `${key} is listed: still over ${BOUND} lines (else it leaves the list)`);
});

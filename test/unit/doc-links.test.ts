// The documents' links and section names resolve (README, "Development"): every relative link in
// README.md and docs/*.md names a file that is there, and every section the code, tests, scripts
// and documents cite by name (README or docs/FILE.md, a comma, the section's title in double
// quotes) is a heading of that document (backquotes aside; a citation may run over comment lines).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../harness/netns.js';

const at = (path: string) => join(packageRoot, path);
const documents = [
  'README.md',
  ...readdirSync(at('docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

function headings(document: string): Set<string> {
  return new Set(
    readFileSync(at(document), 'utf8')
      .split('\n')
      .filter((line) => /^#{1,4} /.test(line))
      .map((line) => line.replace(/^#+ /, '').replaceAll('`', '').trim()),
  );
}

/** Every file whose text may cite a section: sources, tests, scripts, documents. */
function citing(folder = ''): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(at(folder || '.'))) {
    if (/^(node_modules|dist|build|\..*)$/.test(entry)) continue;
    const path = folder ? `${folder}/${entry}` : entry;
    if (statSync(at(path)).isDirectory()) found.push(...citing(path));
    else if (/\.(ts|mjs|js|cc|h|c|sh|md|py|yaml)$/.test(entry)) found.push(path);
  }
  return found;
}

t.test('relative links in README.md and docs/ name files that are there', async (t) => {
  const broken: string[] = [];
  for (const document of documents) {
    const text = readFileSync(at(document), 'utf8');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!) || target!.startsWith('#')) continue;
      const file = target!.split('#')[0]!;
      if (!existsSync(join(dirname(at(document)), file))) broken.push(`${document}: ${target}`);
    }
  }
  t.same(broken, []);
});

t.test('every cited section is a heading of its document', async (t) => {
  const sections = new Map(documents.map((document) => [document, headings(document)]));
  const files = citing();
  t.ok(files.length > 100, `${files.length} files read`);
  const broken: string[] = [];
  let cited = 0;
  for (const file of files) {
    // Comment markers at line starts joined away, so that a citation may run over lines.
    const text = readFileSync(at(file), 'utf8')
      .replace(/\n\s*(\/\/|\*|#)?\s*/g, ' ')
      .replace(/\s+/g, ' ');
    for (const [, document, section] of text.matchAll(
      /\b(README(?:\.md)?|docs\/[a-z-]+\.md),? "([^"]+)"/g,
    )) {
      const name = document!.startsWith('README') ? 'README.md' : document!;
      const known = sections.get(name);
      cited++;
      if (!known?.has(section!.replaceAll('`', ''))) broken.push(`${file}: ${name}, "${section}"`);
    }
  }
  t.ok(cited > 200, `${cited} citations`);
  t.same(broken, [], 'each names a heading (or is rewritten to)');
});

// The documents' links and section names resolve (README, "Development"): every relative link in
// README.md and docs/*.md names a file that is there, and every section the code, tests, scripts
// and documents cite by name (README or docs/FILE.md, a comma, the section's title in double
// quotes) is a heading of that document (backquotes aside; a citation may run over comment lines).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';

const at = (path: string) => join(packageRoot, path);
const documents = [
  'README.md',
  ...readdirSync(at('docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** A document's headings (outside code blocks), backquotes aside. */
function headings(document: string): Set<string> {
  let fenced = false;
  return new Set(
    readFileSync(at(document), 'utf8')
      .split('\n')
      .filter((line) => {
        if (line.startsWith('```')) fenced = !fenced;
        return !fenced && /^#{1,4} /.test(line);
      })
      .map((line) => line.replace(/^#+ /, '').replaceAll('`', '').trim()),
  );
}

/**
 * The anchor a heading gets where the documents are read (GitHub's: lower case, words joined by -).
 */
function anchorOf(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replaceAll(' ', '-');
}

/** Every file whose text may cite a section: sources, tests, scripts, documents. */
function citing(folder = ''): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(at(folder || '.'))) {
    if (/^(node_modules|dist|build|\..*)$/.test(entry) && entry !== '.ci') continue;
    const path = folder ? `${folder}/${entry}` : entry;
    if (statSync(at(path)).isDirectory()) found.push(...citing(path));
    else if (/\.(ts|mjs|js|cc|h|c|sh|md|py|yaml)$|^(Dockerfile|run)$/.test(entry)) found.push(path);
  }
  return found;
}

t.test('relative links in README.md and docs/ name files that are there', async (t) => {
  const broken: string[] = [];
  for (const document of documents) {
    const text = readFileSync(at(document), 'utf8');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!) || target!.startsWith('#')) continue;
      const [file, anchor] = target!.split('#') as [string, string | undefined];
      const path = join(dirname(document), file);
      if (!existsSync(at(path))) broken.push(`${document}: ${target}`);
      else if (anchor !== undefined && path.endsWith('.md')) {
        const anchors = [...headings(path)].map(anchorOf);
        if (!anchors.includes(anchor)) broken.push(`${document}: ${target} (no such heading)`);
      }
    }
  }
  t.same(broken, []);
});

t.test('the README leads to every page of docs/, and every page back to it', async (t) => {
  const pages = documents.filter((d) => d.startsWith('docs/') && !d.endsWith('.template.md'));
  const readme = readFileSync(at('README.md'), 'utf8');
  const linked = new Set([...readme.matchAll(/\]\((docs\/[^)#\s]+)/g)].map((m) => m[1]));
  t.same(
    pages.filter((page) => !linked.has(page)),
    [],
    "every page in the README's handbook",
  );
  t.same(
    pages.filter((page) => !readFileSync(at(page), 'utf8').includes('](../README.md')),
    [],
    'every page links back to the README',
  );
  t.ok(readme.split('\n').length <= 400, 'the README is a front page: 400 lines at most');
});

t.test('anchors are made as the documents are shown', async (t) => {
  t.equal(anchorOf("What the node's NAT does"), 'what-the-nodes-nat-does');
  t.equal(anchorOf('Explain, diff, check'), 'explain-diff-check');
  t.equal(anchorOf('Kubernetes API (opt-in)'), 'kubernetes-api-opt-in');
  t.equal(anchorOf('Reading nft list table ip ipmasq'), 'reading-nft-list-table-ip-ipmasq');
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

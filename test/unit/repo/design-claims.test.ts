// Sentences of docs/design.md that state a rule of the code, kept true: the files of src/ over 600
// lines are the ones it names with why ("Data flow"), and no map in src/ is keyed by an object
// (nor any object held weakly), and every libnftables call beside committed() only reads; server/
// imports nothing of the agent but types; every mode takes its stage options from plan(); nothing
// stores a ready flag; no static import from cli.ts or agent.ts reaches the API's modules or the
// operator's commands; a key with a default is read only through keyValue.
import { readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';
import { parseArgs } from '../../../src/cli/flags.js';
import { plan } from '../../../src/options.js';
import { CONFIG_KEYS } from '../../../src/config/keys.js';

const src = join(packageRoot, 'src');
const design = readFileSync(join(packageRoot, 'docs', 'design.md'), 'utf8');

const texts = new Map(srcModules().map((name) => [name, readFileSync(join(src, name), 'utf8')]));

t.test('the files over 600 lines are the ones the design names, each with why', async (t) => {
  const start = design.indexOf('The files of `src/` over 600 lines');
  t.ok(start >= 0, 'the paragraph is there');
  const paragraph = design.slice(start, design.indexOf('\n\n', start));
  const named = [...paragraph.matchAll(/`([\w/-]+\.ts)` is /g)].map((m) => m[1]!);
  const long = [...texts]
    .filter(([, text]) => text.split('\n').length - 1 > 600)
    .map(([name]) => name);
  t.ok(long.length > 0, 'the count finds long files');
  t.same(named.sort(), long.sort(), 'named with why: exactly the long ones');
});

t.test('no map in src/ is keyed by an object, and no object held weakly', async (t) => {
  for (const [name, text] of texts) t.notMatch(text, /\bWeak(Map|Set|Ref)\b/, `${name}: none`);
});

t.test(
  'every commit of ours goes through committed(): a libnftables call beside it only reads',
  async (t) => {
    const calls: string[] = [];
    for (const [name, text] of texts) {
      if (name === 'kernel/addon.ts') continue;
      t.notMatch(text, /\brunNative\(/, `${name}: no libnftables call of its own`);
      for (const m of text.matchAll(/\b(runNft|readNft)\(\s*(`[^`]*`|'[^']*'|[\w.]+)/g))
        calls.push(`${name}: ${m[1]} ${m[2]}`);
    }
    t.ok(calls.length >= 5, `${calls.length} calls found`);
    const writes = calls.filter((call) => !/: (runNft|readNft) [`'](list|get) /.test(call));
    t.same(writes, [], 'each a list or a get, written out where it is called');
  },
);

t.test(
  'server/ answers from what it is handed: nothing of the agent but types is imported',
  async (t) => {
    const server = [...texts].filter(([name]) => name.startsWith('server/'));
    t.ok(server.length > 0, 'server/ has modules');
    for (const [name, text] of server) {
      const relative = [...text.matchAll(/^(import|export)\b([^;]*?)\bfrom '(\.[^']*)'/gms)];
      for (const m of relative) t.match(m[2]!, /^\s*type\b/, `${name}: ${m[3]} only as types`);
    }
  },
);

// The fields of AgentOptions that plan() maps into a stage's options, found by running it.
function plannedFields(): Set<string> {
  const parsed = parseArgs([], {});
  if (!parsed.ok) throw new Error('the defaults parse');
  const read = new Set<string>();
  const watched = new Proxy(parsed.options, {
    get(target, key, receiver) {
      if (typeof key === 'string') read.add(key);
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
  plan(watched);
  return read;
}

t.test('every mode takes its stage options from plan(): no module reads them itself', async (t) => {
  // `mode` picks the scoping, the rest are stage options; the cluster's read (its node, its
  // families, its labels) takes these three from the flags as well, as the API's own stage.
  const apiToo = new Set(['mode', 'enableIPv6', 'nodeName', 'nodeLabels']);
  const planned = [...plannedFields()].filter((field) => !apiToo.has(field));
  t.ok(
    planned.includes('table') && planned.includes('setLayout'),
    `plan() reads ${planned.join(', ')}`,
  );

  const config = ts.getParsedCommandLineOfConfigFile(
    join(packageRoot, 'tsconfig.build.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  if (!config) throw new Error('tsconfig.build.json parses');
  const program = ts.createProgram(config.fileNames, { ...config.options, noEmit: true });
  const checker = program.getTypeChecker();
  const optionsFile = join(src, 'options.ts');
  const isAgentOption = (symbol: ts.Symbol | undefined): boolean =>
    symbol?.declarations?.some(
      (d) =>
        d.getSourceFile().fileName === optionsFile &&
        ts.isInterfaceDeclaration(d.parent) &&
        d.parent.name.text === 'AgentOptions',
    ) ?? false;

  const reads: string[] = [];
  let seen = 0;
  for (const file of program.getSourceFiles()) {
    const name = file.fileName;
    // options.ts is the mapping; flags.ts makes the options from argv.
    if (!name.startsWith(src) || name === optionsFile || name.endsWith('/cli/flags.ts')) continue;
    const visit = (node: ts.Node): void => {
      let field: ts.Identifier | ts.PrivateIdentifier | undefined;
      let symbol: ts.Symbol | undefined;
      if (ts.isPropertyAccessExpression(node)) {
        field = node.name;
        symbol = checker.getSymbolAtLocation(node.name);
      } else if (ts.isBindingElement(node) && ts.isObjectBindingPattern(node.parent)) {
        const key = node.propertyName ?? node.name;
        if (ts.isIdentifier(key)) {
          field = key;
          symbol = checker.getTypeAtLocation(node.parent).getProperty(key.text);
        }
      }
      if (field && isAgentOption(symbol)) {
        seen++;
        if (planned.includes(field.text)) {
          const { line } = file.getLineAndCharacterOfPosition(node.getStart());
          reads.push(`${relative(src, name)}:${line + 1} ${field.text}`);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  t.ok(seen > 20, `${seen} reads of AgentOptions found outside options.ts`);
  t.same(reads, [], 'none of them a stage option plan() maps');
});

t.test('readiness is derived, never stored: only agentStatus sets `ready`', async (t) => {
  const sets = /\bready\s*(:|=(?![=>]))/;
  for (const [name, text] of texts) {
    if (name !== 'reconcile/status.ts') t.notMatch(text, sets, `${name}: sets no ready`);
  }
  const status = texts.get('reconcile/status.ts') ?? '';
  const found = [...status.matchAll(new RegExp(sets, 'g'))].map((m) =>
    status.slice(m.index, status.indexOf('\n', m.index)),
  );
  t.same(
    found,
    ['ready: boolean;', 'ready: reason === null,'],
    'the type, and agentStatus deriving it',
  );
});

/** The modules of src/ a module's static value imports reach (no `import type`, no `import()`). */
function loadedWith(root: string): Set<string> {
  const seen = new Set([root]);
  const todo = [root];
  while (todo.length > 0) {
    const module = todo.pop()!;
    const text = texts.get(module) ?? '';
    for (const m of text.matchAll(
      /^(?:import|export)(?!\s+type\b)\b[^;'"]*?(?:from\s*)?['"](\.[^'"]+)['"]/gm,
    )) {
      const target = normalize(join(dirname(module), m[1]!)).replace(/\.js$/, '.ts');
      if (texts.has(target) && !seen.has(target)) {
        seen.add(target);
        todo.push(target);
      }
    }
  }
  return seen;
}

t.test(
  'the API and the operator commands load only when asked: no static import reaches them',
  async (t) => {
    const commands = ['cli/operator.ts', 'cli/explain.ts', 'cli/live.ts', 'cli/flows.ts'];
    const asked = [...commands, 'cli/cleanup.ts', 'cli/cluster-config.ts', 'explain.ts', 'diff.ts'];
    for (const root of ['cli.ts', 'agent.ts']) {
      const loaded = [...loadedWith(root)];
      t.ok(loaded.length > 20, `${root}: ${loaded.length} modules follow it`);
      t.same(
        loaded.filter((m) => m.startsWith('kubernetes/') && m !== 'kubernetes/pod-cidrs.ts'),
        [],
        `${root}: nothing of kubernetes/ but the flag's default (pod-cidrs.ts)`,
      );
      t.same(
        loaded.filter((m) => asked.includes(m)),
        [],
        `${root}: no operator command`,
      );
    }
    // The reader sees a dynamic import for what it is: cli.ts reaches the agent only through one.
    t.notOk(loadedWith('cli.ts').has('agent.ts'), 'cli.ts loads the agent by import()');
    t.ok(loadedWith('agent.ts').has('reconcile/reconciler.ts'), 'a static import is followed');
    t.ok(loadedWith('cli/cluster-config.ts').has('kubernetes/index.ts'), 'and across folders');
  },
);

t.test(
  'a key with a default is read only through keyValue (docs/design.md, "Adding a config key")',
  async (t) => {
    const defaulted = Object.entries(CONFIG_KEYS)
      .filter(([, spec]) => 'default' in spec)
      .map(([name]) => name);
    t.ok(defaulted.includes('cidrLimit') && defaulted.length >= 3, defaulted.join(', '));
    const names = defaulted.join('|');
    const direct = new RegExp(
      `\\bkeys\\??\\.(${names})\\b|\\{[^}]*\\b(${names})\\b[^}]*\\}\\s*=\\s*[\\w.?]*keys\\b`,
    );
    t.match('if (n > config.keys.cidrLimit) return;', direct, 'the reader sees a read');
    t.match('const { resyncInterval } = policy.keys;', direct, 'and a destructuring');
    t.notMatch("keyValue(config.keys, 'cidrLimit')", direct, 'keyValue is no read');
    for (const [name, text] of texts) {
      if (name !== 'config/keys.ts') t.notMatch(text, direct, `${name}: through keyValue`);
    }
  },
);

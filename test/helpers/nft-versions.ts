// The nft userlands a cross-version test runs beside the agent: this machine's own nft, and the nft of
// each root in IPMASQ_NFT_ROOTS (colon-separated; scripts/userland.sh sets it), run with chroot. Without
// the variable, the root scripts/userland.sh caches for trixie is used when present. Under CI=true a
// matrix of fewer than two versions is a failure, never a skip.
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { inNetns, type ExecResult, type TapTest } from '../../harness/netns.js';

export interface NftTool {
  /** e.g. `1.0.6` */
  readonly version: string;
  /** The command before nft's own arguments: `['nft']` or `['chroot', ROOT, 'nft']`. */
  readonly command: readonly string[];
  /** Whether this is the userland the tests (and the agent under test) run in. */
  readonly own: boolean;
}

const DEFAULT_ROOT = '/var/cache/ipmasq-agent/trixie';

function versionOf(command: readonly string[]): string | undefined {
  try {
    const [cmd = 'nft', ...args] = command;
    const out = execFileSync(cmd, [...args, '--version'], { encoding: 'utf8', timeout: 10_000 });
    return /v(\d+\.\d+\.\d+)/.exec(out)?.[1];
  } catch {
    return undefined;
  }
}

let cached: NftTool[] | undefined;

/** Every nft userland reachable here, this one first; one per distinct version. */
export function nftTools(): NftTool[] {
  if (cached) return cached;
  const configured = process.env.IPMASQ_NFT_ROOTS;
  const roots = configured
    ? configured.split(':').filter(Boolean)
    : existsSync(`${DEFAULT_ROOT}/usr/sbin/nft`)
      ? [DEFAULT_ROOT]
      : [];
  const candidates = [
    { command: ['nft'], own: true },
    ...roots.map((root) => ({ command: ['chroot', root, 'nft'], own: false })),
  ];
  const tools: NftTool[] = [];
  for (const candidate of candidates) {
    const version = versionOf(candidate.command);
    if (version && !tools.some((tool) => tool.version === version))
      tools.push({ ...candidate, version });
  }
  cached = tools;
  return tools;
}

function fewerThanTwo(tools: readonly NftTool[]): string {
  return (
    `only nft ${tools.map((tool) => tool.version).join(', ') || '(none)'} here; ` +
    'run scripts/userland.sh --root trixie (or set IPMASQ_NFT_ROOTS) for a second version'
  );
}

/**
 * The matrix, or undefined (after a skip, or a failure under CI=true) when it has fewer than two
 * versions to compare.
 */
export function requireMatrix(t: TapTest): NftTool[] | undefined {
  const tools = nftTools();
  if (tools.length >= 2) return tools;
  if (process.env.CI === 'true') t.fail(`${fewerThanTwo(tools)}; CI=true forbids skipping`);
  else t.plan(0, fewerThanTwo(tools));
  return undefined;
}

/**
 * Every nft version here, for a test that also means something with one: fewer than two fails under
 * CI=true, and is said in a comment otherwise.
 */
export function versionsHere(t: TapTest & { comment(message: string): void }): NftTool[] {
  const tools = nftTools();
  if (tools.length >= 2) return tools;
  if (process.env.CI === 'true') t.fail(`${fewerThanTwo(tools)}; CI=true forbids skipping`);
  else t.comment(fewerThanTwo(tools));
  return tools;
}

/** Runs this tool's nft in ns; rejects with its stderr when it fails (a crash included). */
export function runNftTool(
  ns: string,
  tool: NftTool,
  args: readonly string[],
  input?: string,
): Promise<ExecResult> {
  const [cmd = 'nft', ...prefix] = tool.command;
  return inNetns(ns, cmd, [...prefix, ...args], input === undefined ? {} : { input });
}

/** Our tables, `ip ipmasq` then `ip6 ipmasq`, as each of these nft versions lists them in ns. */
export async function ourListings(ns: string, tools: readonly NftTool[]): Promise<string[]> {
  const out: string[] = [];
  for (const tool of tools)
    for (const family of ['ip', 'ip6'])
      out.push((await runNftTool(ns, tool, ['list', 'table', family, 'ipmasq'])).stdout);
  return out;
}

/**
 * Our tables' set items as the kernel holds them (this tool's nft at --debug=netlink); the rules
 * are left out, whose handles differ by the namespace's history.
 */
export async function ourSetItems(ns: string, tool: NftTool): Promise<string> {
  const out: string[] = [];
  for (const family of ['ip', 'ip6']) {
    const { stdout } = await runNftTool(ns, tool, [
      '--debug=netlink',
      'list',
      'table',
      family,
      'ipmasq',
    ]);
    out.push(...stdout.split('\n').filter((line) => /^\S+ \S+ @|^\telement /.test(line)));
  }
  return out.join('\n');
}

/** Whether this tool's `nft list ruleset` in ns exits 0: the cache fill that crashes old versions. */
export async function listsRuleset(ns: string, tool: NftTool): Promise<boolean> {
  try {
    await runNftTool(ns, tool, ['list', 'ruleset']);
    return true;
  } catch {
    return false;
  }
}

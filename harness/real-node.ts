// A real one-node cluster (scripts/node.sh): control plane, kube-controller-manager, kube-scheduler,
// containerd and kubelet in a network namespace of their own, pods on a CNI bridge, a "remote"
// namespace behind a veth. Started once per test file, taken down at teardown, and by the script's
// watcher should this process die without its teardown.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inNetns, packageRoot, type TapTest } from './netns.js';
import { python } from './topology.js';

const script = join(packageRoot, 'scripts', 'node.sh');
const echoScript = join(packageRoot, 'harness', 'echo.py');
/** The port the remote's echo answers on. */
export const NODE_ECHO_PORT = 9999;

export interface RealNode {
  /** DIR/env of scripts/node.sh up: KUBECTL, HELM, NODE_NETNS, REMOTE_NETNS, NODE_IP, … */
  readonly env: Readonly<Record<string, string>>;
  readonly dir: string;
  /** kubectl as the admin, in the node's namespace; stdout. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** kubectl with `-o json`, parsed. */
  json<T = Record<string, unknown>>(args: string[]): Promise<T>;
  /** Runs a command in the node's network namespace; stdout. */
  inNode(cmd: string, args: string[]): Promise<string>;
  /** The network namespace the CNI made for the pod holding `ip`. */
  podNetns(ip: string): Promise<string>;
  /**
   * New UDP flows from namespace `ns` to each destination (a fresh socket each): the source
   * address the remote saw, or undefined when nothing answered.
   */
  sources(ns: string, destinations: readonly string[]): Promise<Map<string, string | undefined>>;
}

/** Brings the node up (its binaries built first on a machine that has none: minutes). */
export async function startRealNode(t: TapTest): Promise<RealNode> {
  const parent = mkdtempSync(join(tmpdir(), 'ipmasq-node-'));
  const dir = join(parent, 'node');
  t.teardown(async () => {
    await runScript(script, ['down', dir]);
    rmSync(parent, { recursive: true, force: true });
  });
  await runScript(script, ['up', dir], { NODE_OWNER: String(process.pid) });
  const env = Object.fromEntries(
    readFileSync(join(dir, 'env'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  ) as Record<string, string>;
  const ns = env.NODE_NETNS!;
  const kubectl = async (args: string[], input?: string) =>
    (
      await inNetns(ns, env.KUBECTL!, ['--kubeconfig', env.KUBECONFIG!, ...args], {
        timeoutMs: 180_000,
        ...(input === undefined ? {} : { input }),
      })
    ).stdout;
  // The remote answers every flow with the source address it saw.
  const echo = spawn('ip', [
    'netns',
    'exec',
    env.REMOTE_NETNS!,
    python,
    echoScript,
    'serve',
    String(NODE_ECHO_PORT),
    '3600',
    env.REMOTE_IP!,
    env.REMOTE_MASQ_IP!,
  ]);
  t.teardown(() => echo.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the remote echo did not start')), 10_000);
    echo.stdout.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return {
    env,
    dir,
    kubectl,
    json: async <T>(args: string[]) => JSON.parse(await kubectl([...args, '-o', 'json'])) as T,
    inNode: async (cmd, args) => (await inNetns(ns, cmd, args, { timeoutMs: 60_000 })).stdout,
    podNetns: async (ip) => {
      for (const name of readdirSync('/run/netns').filter((n) => n.startsWith('cni-'))) {
        const { stdout } = await inNetns(name, 'ip', ['-4', '-o', 'addr', 'show']);
        if (stdout.includes(` ${ip}/`)) return name;
      }
      throw new Error(`no pod namespace holds ${ip}`);
    },
    sources: async (from, destinations) => {
      const { stdout } = await inNetns(
        from,
        python,
        [echoScript, 'probe', 'udp', String(NODE_ECHO_PORT), '2', '3', ...destinations],
        { timeoutMs: 30_000 },
      );
      const seen = new Map<string, string | undefined>();
      for (const line of stdout.split('\n').filter(Boolean)) {
        const answer = JSON.parse(line) as { dst: string; address?: string };
        seen.set(answer.dst, answer.address);
      }
      return seen;
    },
  };
}

/** Runs the script in the test's own namespace, with more environment; rejects on failure. */
function runScript(cmd: string, args: string[], env: Record<string, string> = {}) {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('bash', [cmd, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const stderr: Buffer[] = [];
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 1_800_000);
    child.once('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`${cmd} ${args.join(' ')}: ${Buffer.concat(stderr).toString()}`));
    });
  });
}

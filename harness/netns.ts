// Network namespaces for kernel and packet tests: create them, run commands in them, always clean up.
//
// Node cannot run its own code inside another namespace: setns() changes only the calling thread,
// and the addon runs libnftables on libuv pool threads. So code under test that must see a
// namespace runs in a child process started inside it:
//   ip netns exec NS node --import tsx script.ts ARGS   (spawnNodeInNetns / runNodeInNetns)
// tsx runs a TypeScript file directly, under tap or not. The test process stays outside, creates
// the namespace (makeNetns, which registers its teardown), drives the child and asserts.
// For packets across namespaces, see ./topology.ts (re-exported below).
import {
  execFile,
  execFileSync,
  spawn,
  type ChildProcessWithoutNullStreams,
} from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What these helpers need from a tap test (the root `t` or a subtest). */
export interface TapTest {
  teardown(fn: () => unknown): void;
  fail(message: string): boolean;
  plan(count: number, comment?: string): void;
}

export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const DEFAULT_TIMEOUT_MS = 15_000;
const MAX_OUTPUT_BYTES = 256 * 1024 * 1024; // a 100 000-element listing is a few MiB

/**
 * Tests needing CAP_NET_ADMIN call this first and return when it is false. Not root: a skip, or a
 * failure under CI=true, where a missing capability must not pass as a skip.
 */
/** A fresh directory under the system's temp dir, removed when the test ends. */
export function tempDir(t: TapTest, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `ipmasq-${prefix}-`));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function requireRoot(t: TapTest): boolean {
  if (process.getuid?.() === 0) return true;
  if (process.env.CI === 'true') {
    t.fail(
      'this test needs root (CAP_NET_ADMIN to create network namespaces); CI=true forbids skipping',
    );
  } else {
    t.plan(0, 'needs root (CAP_NET_ADMIN) to create network namespaces');
  }
  return false;
}

/** Whether `tool` is on the PATH; a skip without it, a failure under CI=true (which installs it). */
export function requireTool(t: TapTest, tool: string, pkg: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    return true;
  } catch {
    if (process.env.CI === 'true')
      t.fail(`${tool} is missing (apt-get install ${pkg}); CI=true forbids skipping`);
    else t.plan(0, `needs ${tool} (apt-get install ${pkg})`);
    return false;
  }
}

let netnsCounter = 0;
const liveNamespaces = new Set<string>();
let exitHookInstalled = false;

/** Creates a uniquely named network namespace, deleted (with anything running in it) at teardown. */
export async function makeNetns(t: TapTest, prefix: string): Promise<string> {
  if (!/^[a-z][a-z0-9-]{0,15}$/.test(prefix)) throw new Error(`bad netns prefix ${prefix}`);
  if (netnsCounter === 0) deleteOrphanedNamespaces();
  netnsCounter += 1;
  const name = `${prefix}-${process.pid}-${netnsCounter}-${randomBytes(3).toString('hex')}`;
  await execChecked('ip', ['netns', 'add', name], {});
  liveNamespaces.add(name);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', deleteLeftoverNamespaces);
  }
  t.teardown(() => deleteNetns(name));
  return name;
}

function netnsPids(name: string): number[] {
  try {
    const out = execFileSync('ip', ['netns', 'pids', name], { encoding: 'utf8' });
    return out.split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

// Synchronous so that the same code serves teardown and the process 'exit' hook.
function deleteNetns(name: string): void {
  for (const pid of netnsPids(name)) {
    try {
      process.kill(pid, 'SIGKILL'); // only processes this test started inside its own namespace
    } catch {
      // already gone
    }
  }
  try {
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  } catch {
    // already deleted
  }
  liveNamespaces.delete(name);
}

// Teardowns do not run when a test file dies early; this catches what is left at a normal exit.
function deleteLeftoverNamespaces(): void {
  for (const name of [...liveNamespaces]) deleteNetns(name);
}

const harnessName = /^[a-z][a-z0-9-]*-(\d+)-\d+-[0-9a-f]{6}$/;

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

// A test killed by a signal (tap's timeout) runs no teardown and no exit hook: remove the names it
// left, once per process. Only the name goes; whatever still runs inside ends on its own (the
// echo server and the addon server exit when their stdin closes).
function deleteOrphanedNamespaces(): void {
  let listing: string;
  try {
    listing = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  } catch {
    return;
  }
  for (const name of listing.split('\n').map((line) => line.split(' ')[0] ?? '')) {
    const creator = harnessName.exec(name)?.[1];
    if (creator === undefined || processAlive(Number(creator))) continue;
    try {
      execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
    } catch {
      // deleted meanwhile by another test process
    }
  }
}

export interface ExecOptions {
  timeoutMs?: number;
  /** Written to the command's stdin. */
  input?: string;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
}

function execChecked(cmd: string, args: string[], opts: ExecOptions): Promise<ExecResult> {
  return new Promise((resolvePromise, reject) => {
    const child = execFile(
      cmd,
      args,
      {
        timeout: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        maxBuffer: MAX_OUTPUT_BYTES,
        killSignal: 'SIGKILL',
      },
      (err, stdout, stderr) => {
        if (!err) return resolvePromise({ stdout, stderr });
        const why = stderr.trim() || err.message;
        reject(new Error(`${cmd} ${args.join(' ')}: ${why}`, { cause: err }));
      },
    );
    // A command that exits without reading its stdin must not turn into an EPIPE crash here.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(opts.input ?? '');
  });
}

/** Runs `ip netns exec ns cmd args`; rejects with the command's stderr when it fails or times out. */
export function inNetns(
  ns: string,
  cmd: string,
  args: string[],
  opts: ExecOptions = {},
): Promise<ExecResult> {
  return execChecked('ip', ['netns', 'exec', ns, cmd, ...args], opts);
}

/** Synchronous inNetns, returning stdout; throws with the command's stderr. */
export function inNetnsSync(
  ns: string,
  cmd: string,
  args: string[],
  opts: ExecOptions = {},
): string {
  try {
    return execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], {
      encoding: 'utf8',
      input: opts.input ?? '',
      timeout: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      maxBuffer: MAX_OUTPUT_BYTES,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (err) {
    const stderr = String((err as { stderr?: unknown }).stderr ?? '').trim();
    throw new Error(`${cmd} ${args.join(' ')} in ${ns}: ${stderr || (err as Error).message}`, {
      cause: err,
    });
  }
}

export interface NodeInNetnsOptions {
  /** Added to this process's environment. */
  env?: Record<string, string>;
  /** Extra node flags, e.g. `--expose-gc`. */
  nodeFlags?: string[];
}

/** Starts `node --import tsx scriptPath args` inside ns, with pipes on stdin/stdout/stderr. */
export function spawnNodeInNetns(
  ns: string,
  scriptPath: string,
  args: string[] = [],
  opts: NodeInNetnsOptions = {},
): ChildProcessWithoutNullStreams {
  const nodeArgs = ['--import', 'tsx', ...(opts.nodeFlags ?? []), scriptPath, ...args];
  return spawn('ip', ['netns', 'exec', ns, process.execPath, ...nodeArgs], {
    cwd: packageRoot, // where `--import tsx` is resolved
    env: { ...process.env, ...opts.env },
  });
}

export interface NodeRunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a TypeScript/JavaScript file to completion inside ns; killed after timeoutMs. */
export function runNodeInNetns(
  ns: string,
  scriptPath: string,
  args: string[] = [],
  opts: NodeInNetnsOptions & ExecOptions = {},
): Promise<NodeRunResult> {
  const child = spawnNodeInNetns(ns, scriptPath, args, opts);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
  child.stdin.on('error', () => undefined); // EPIPE if the script exits without reading
  child.stdin.end(opts.input ?? '');
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
  return new Promise((resolvePromise, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({
        code,
        signal,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
      });
    });
  });
}

export * from './topology.js';

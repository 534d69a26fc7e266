// Shared plumbing for the benchmarks: a scope that owns namespaces and processes and always cleans
// them up, bounded command timing, statistics and the machine description.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeNetns, python, type TapTest } from '../harness/netns.js';

/**
 * Stands in for tap's `t` so the test helpers (makeNetns, makeTopology, startAgent) can be used
 * outside tap: teardowns run in reverse order when close() is called, which callers do in finally.
 */
export class Scope implements TapTest {
  private readonly teardowns: Array<() => unknown> = [];

  teardown(fn: () => unknown): void {
    this.teardowns.push(fn);
  }

  fail(message: string): boolean {
    throw new Error(message);
  }

  plan(): void {}

  async close(): Promise<void> {
    const errors: unknown[] = [];
    for (const fn of this.teardowns.splice(0).reverse()) {
      try {
        await fn();
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length > 0) console.error('bench: cleanup errors:', errors);
  }
}

/** Runs fn with a fresh scope and always closes it. */
export async function withScope<T>(fn: (scope: Scope) => Promise<T>): Promise<T> {
  const scope = new Scope();
  try {
    return await fn(scope);
  } finally {
    await scope.close();
  }
}

export function netns(scope: Scope, prefix = 'bench'): Promise<string> {
  return makeNetns(scope, prefix);
}

/** A temporary directory, removed when the scope closes. */
export async function tempDir(scope: Scope): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-bench-'));
  scope.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export interface RunResult {
  ms: number;
  stdout: string;
}

/** Runs a command to completion, timing it from spawn to exit; rejects on failure or timeout. */
export function timed(cmd: string, args: string[], timeoutMs = 120_000): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const child = execFile(
      cmd,
      args,
      { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 256 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const ms = performance.now() - start;
        if (err)
          reject(
            new Error(`${cmd} ${args.slice(0, 6).join(' ')}: ${stderr.trim() || err.message}`),
          );
        else resolve({ ms, stdout });
      },
    );
    child.stdin?.end();
  });
}

const TIME_CHILD =
  'import subprocess,sys,time\n' +
  't=time.perf_counter()\n' +
  'r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE)\n' +
  'ms=(time.perf_counter()-t)*1000\n' +
  'sys.stderr.write(r.stderr.decode())\n' +
  'print(ms)\n' +
  'sys.exit(r.returncode)\n';

/**
 * Times `cmd args` from inside ns (a python parent starts it and reads the clock around it), so
 * the time is the command's own, from exec to exit, without `ip netns exec`'s set-up.
 */
export async function timedInside(
  ns: string,
  cmd: string,
  args: string[],
  timeoutMs?: number,
): Promise<number> {
  const { stdout } = await timedIn(ns, python, ['-c', TIME_CHILD, cmd, ...args], timeoutMs);
  return Number(stdout.trim());
}

/** `ip netns exec ns cmd args`, timed. */
export function timedIn(
  ns: string,
  cmd: string,
  args: string[],
  timeoutMs?: number,
): Promise<RunResult> {
  return timed('ip', ['netns', 'exec', ns, cmd, ...args], timeoutMs);
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Nearest-rank percentile, p in 0..100. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] as number;
}

/**
 * Latencies as a client arriving at a random moment sees them: a poller waits out a stall in one
 * request, so a request of L ms also stands for the ones that would have been sent every
 * intervalMs meanwhile (L − i, L − 2i, …) — the usual correction for coordinated omission.
 */
export function arrivalLatencies(latencies: readonly number[], intervalMs: number): number[] {
  const corrected: number[] = [];
  for (const latency of latencies) {
    corrected.push(latency);
    for (let missed = latency - intervalMs; missed > 0; missed -= intervalMs)
      corrected.push(missed);
  }
  return corrected;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Rounds for display: 3 significant digits, at most 2 decimals. */
export function fmt(value: number): string {
  if (!Number.isFinite(value)) return '—';
  if (Math.abs(value) >= 100) return String(Math.round(value));
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

export function verdict(pass: boolean): string {
  return pass ? '**PASS**' : '**FAIL**';
}

export interface Machine {
  cpus: number;
  cpuModel: string;
  kernel: string;
  nft: string;
  iptables: string;
  node: string;
  loadBefore: number[];
  concurrentTests: boolean;
  date: string;
}

function commandOutput(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  } catch {
    return 'unknown';
  }
}

/** Whether other engineers' test runs (tap, other agents) were running while we measured. */
function otherTestsRunning(): boolean {
  const listing = commandOutput('ps', ['-eo', 'pid,args']);
  return listing
    .split('\n')
    .some(
      (line) =>
        /\b(tap|npm test|ipmasq-agent\.js)\b/.test(line) && !line.includes(String(process.pid)),
    );
}

export function describeMachine(): Machine {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    kernel: commandOutput('uname', ['-r']),
    nft: commandOutput('nft', ['--version']),
    iptables: commandOutput('iptables-nft', ['--version']),
    node: process.version,
    loadBefore: loadavg().map((l) => Math.round(l * 100) / 100),
    concurrentTests: otherTestsRunning(),
    date: new Date().toISOString(),
  };
}

/** Jiffies per second for /proc/PID/stat times. */
export const CLOCK_TICKS = Number(commandOutput('getconf', ['CLK_TCK'])) || 100;

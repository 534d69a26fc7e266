// A running agent in its own namespace plus a persistent python client beside it (poller.py), so
// polls cost one keep-alive request each rather than a process spawn.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { metricValue, startAgent, type RunningAgent } from '../harness/agent.js';
import { python } from '../harness/topology.js';
import { netns, tempDir, timedIn, type Scope } from './harness.js';
import { configText } from './scripts.js';

const PORT = 9410;
const pollerScript = join(dirname(fileURLToPath(import.meta.url)), 'poller.py');

export interface SwapResult {
  ms: number;
  latencies: number[];
  generation: number;
}

export class AgentSession {
  readonly ns: string;
  readonly agent: RunningAgent;
  readonly configFile: string;
  private readonly stagingFile: string;
  private readonly poller: ChildProcessWithoutNullStreams;
  private readonly lines: Interface;
  private readonly answers: string[] = [];
  private waiting: ((line: string) => void) | undefined;

  private constructor(ns: string, agent: RunningAgent, configFile: string, stagingFile: string) {
    this.ns = ns;
    this.agent = agent;
    this.configFile = configFile;
    this.stagingFile = stagingFile;
    this.poller = spawn('ip', ['netns', 'exec', ns, python, pollerScript, String(PORT)]);
    this.poller.stdin.on('error', () => undefined);
    this.lines = createInterface({ input: this.poller.stdout });
    this.lines.on('line', (line) => {
      const waiter = this.waiting;
      this.waiting = undefined;
      if (waiter) waiter(line);
      else this.answers.push(line);
    });
  }

  /** Starts the agent on a config of `count` CIDRs in a fresh namespace; waits for generation 1. */
  static async start(
    scope: Scope,
    count: number,
    extraArgs: string[] = [],
    timeoutMs = 120_000,
    /** Runs in the new namespace before the agent starts; returns more arguments for it. */
    prepare?: (ns: string) => Promise<string[]>,
    /** The node binary to run the agent with (harness/agent.ts, copyOfNode). */
    node = process.execPath,
  ): Promise<AgentSession> {
    const ns = await netns(scope, 'bench-agent');
    await timedIn(ns, 'ip', ['link', 'set', 'lo', 'up']);
    if (prepare) extraArgs = [...extraArgs, ...(await prepare(ns))];
    return AgentSession.startIn(scope, ns, count, extraArgs, timeoutMs, node);
  }

  /** As start, in a namespace the caller made (the node of a topology, bench/edit-packets.ts). */
  static async startIn(
    scope: Scope,
    ns: string,
    count: number,
    extraArgs: string[] = [],
    timeoutMs = 120_000,
    node = process.execPath,
  ): Promise<AgentSession> {
    const dir = await tempDir(scope);
    await mkdir(join(dir, 'config'));
    await mkdir(join(dir, 'staging'));
    const configFile = join(dir, 'config', 'ip-masq-agent');
    await writeFile(configFile, configText(count));
    // The interval layout unless a caller asks otherwise: the baseline is `nft -f` of that script.
    const layout = extraArgs.includes('--set-layout') ? [] : ['--set-layout', 'interval'];
    const args = ['--config', configFile, '--listen', `127.0.0.1:${PORT}`, ...layout, ...extraArgs];
    const agent = startAgent(scope, ns, args, [], node);
    const session = new AgentSession(ns, agent, configFile, join(dir, 'staging', 'next'));
    scope.teardown(() => session.close());
    await session.waitForGeneration(1, timeoutMs);
    return session;
  }

  get pid(): number {
    const pid = this.agent.child.pid;
    if (pid === undefined) throw new Error('agent has no pid');
    // `ip netns exec` execs the command, so this is node itself.
    const comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    if (comm !== 'node') throw new Error(`pid ${pid} is ${comm}, not the agent`);
    return pid;
  }

  private async command(line: string, timeoutMs: number): Promise<Record<string, unknown>> {
    if (this.waiting) throw new Error('poller busy');
    const answer = new Promise<string>((resolve, reject) => {
      const queued = this.answers.shift();
      if (queued !== undefined) return resolve(queued);
      const timer = setTimeout(() => {
        this.waiting = undefined;
        reject(new Error(`poller: no answer to "${line.slice(0, 60)}" in ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting = (text) => {
        clearTimeout(timer);
        resolve(text);
      };
    });
    this.poller.stdin.write(`${line}\n`);
    const parsed = JSON.parse(await answer) as Record<string, unknown>;
    if (typeof parsed.error === 'string') throw new Error(`poller: ${parsed.error}`);
    return parsed;
  }

  async get(path: string): Promise<{ status: number; body: string }> {
    const answer = await this.command(`get ${path}`, 15_000);
    return { status: answer.status as number, body: answer.body as string };
  }

  async generation(): Promise<number> {
    const { body } = await this.get('/healthz');
    return (JSON.parse(body) as { generation: number }).generation;
  }

  async waitForGeneration(generation: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let lastError: unknown;
    for (;;) {
      try {
        if ((await this.generation()) >= generation) return;
      } catch (err) {
        lastError = err; // not listening yet
      }
      if (this.agent.child.exitCode !== null) {
        throw new Error(`agent exited: ${this.agent.stderr.join('').slice(0, 500)}`);
      }
      if (Date.now() > deadline)
        throw new Error(`agent: generation ${generation} not reached (${String(lastError)})`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * Writes a config of `count` CIDRs the way a ConfigMap update lands (a rename into the watched
   * directory) and times it until /healthz shows the next generation.
   */
  async swapConfig(count: number, variant: 0 | 1, timeoutMs = 60_000): Promise<SwapResult> {
    return this.swapText(configText(count, variant), timeoutMs);
  }

  /** As swapConfig, with the config's text given. */
  async swapText(text: string, timeoutMs = 60_000): Promise<SwapResult> {
    await writeFile(this.stagingFile, text);
    const next = (await this.generation()) + 1;
    const answer = await this.command(
      `swap ${this.stagingFile} ${this.configFile} ${next} ${timeoutMs / 1000}`,
      timeoutMs + 5_000,
    );
    return answer as unknown as SwapResult;
  }

  /**
   * Swaps `text` in as swapText does, without waiting for it to be written; returns when the rename
   * was made, in CLOCK_MONOTONIC ns (what `process.hrtime` and Python's `time.monotonic_ns` read).
   */
  swapWithoutWaiting(text: string): bigint {
    writeFileSync(this.stagingFile, text);
    const at = process.hrtime.bigint();
    renameSync(this.stagingFile, this.configFile);
    return at;
  }

  /**
   * Probes `paths` in turn every `intervalMs` for `seconds` from a second client (each request on a
   * fresh connection, as a kubelet probes), beside whatever this session's own client does:
   * [path, status (0: no answer within 10 s), ms] each.
   */
  async probe(
    seconds: number,
    intervalMs: number,
    paths: readonly string[],
  ): Promise<Array<[string, number, number]>> {
    const child = spawn('ip', ['netns', 'exec', this.ns, python, pollerScript, String(PORT)]);
    child.stdin.on('error', () => undefined);
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.stdin.end(`probe ${seconds} ${intervalMs} ${paths.join(' ')}\n`);
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000);
    await done;
    clearTimeout(timer);
    const answer = JSON.parse(out.trim().split('\n').pop() ?? '{}') as {
      samples?: Array<[string, number, number]>;
      error?: string;
    };
    if (!answer.samples) throw new Error(`probe: ${answer.error ?? 'no answer'}`);
    return answer.samples;
  }

  async sampleHealth(count: number, intervalMs: number): Promise<number[]> {
    const answer = await this.command(
      `sample ${count} ${intervalMs}`,
      count * (intervalMs + 100) + 10_000,
    );
    return answer.latencies as number[];
  }

  async metrics(): Promise<(series: string) => number> {
    const { body } = await this.get('/metrics');
    return (series) => metricValue(body, series) ?? 0;
  }

  /**
   * The time the agent's threads have run, in milliseconds, to the nanosecond the scheduler keeps
   * (/proc/PID/task/T/schedstat): utime and stime come in 10 ms ticks, too coarse for a window of a
   * few seconds at a few milliseconds a second. A thread that ended is not counted; the agent's
   * threads (main, its load worker, libuv's pool) live as long as it does.
   */
  cpuMs(): number {
    let ns = 0;
    for (const task of readdirSync(`/proc/${this.pid}/task`)) {
      try {
        ns += Number(
          readFileSync(`/proc/${this.pid}/task/${task}/schedstat`, 'utf8').split(' ')[0],
        );
      } catch {
        // The thread ended between the listing and the read.
      }
    }
    return ns / 1e6;
  }

  /** utime + stime of the agent, in jiffies. */
  cpuTicks(): number {
    const stat = readFileSync(`/proc/${this.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields after the command name start at field 3 (state); utime is field 14, stime 15.
    return Number(fields[11]) + Number(fields[12]);
  }

  /** VmRSS and its anonymous and file-backed parts (the node binary's text is file-backed), in KiB. */
  rssKiB(): { total: number; anon: number; file: number } {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const field = (name: string) => {
      const match = new RegExp(`${name}:\\s+(\\d+) kB`).exec(status);
      return match?.[1] ? Number(match[1]) : Number.NaN;
    };
    return { total: field('VmRSS'), anon: field('RssAnon'), file: field('RssFile') };
  }

  /** A timing field (durationMs, loadMs, applyMs) of the agent's log line for a generation's write. */
  writeLogMs(generation: number, field: string): number | undefined {
    const line = this.agent.logs.find(
      (entry) => entry.msg === 'ruleset written to the kernel' && entry.generation === generation,
    );
    const value = line?.[field];
    return typeof value === 'number' ? value : undefined;
  }

  /**
   * Ends the agent and waits for it to exit, so that its commit monitor no longer listens (a bare
   * `nft -f` measured after it pays for no notifications on its behalf, bench/whole.ts).
   */
  async stop(): Promise<void> {
    if (this.agent.child.exitCode === null && this.agent.child.signalCode === null) {
      this.agent.child.kill('SIGTERM');
      await this.agent.exited;
    }
    this.close();
  }

  close(): void {
    this.lines.close();
    this.poller.stdin.end();
    if (this.poller.exitCode === null) this.poller.kill('SIGKILL');
  }
}

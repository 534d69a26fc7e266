// Runs the built agent (bin/ipmasq-agent.js → dist/) inside a test namespace and observes it: its
// JSON log lines, its tables as nft lists them, and its HTTP answers (fetched from inside the
// namespace).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { inNetns, packageRoot, type TapTest } from './netns.js';
import { python } from './topology.js';

export const agentBin = join(packageRoot, 'bin', 'ipmasq-agent.js');

/**
 * The agent with some of its parts given (harness/agent-with-parts.js): startAgent's `entry`. A
 * fault put in on purpose for an audit's test, shorter Kubernetes timings (KubernetesTimings).
 */
export function agentWithParts(parts: {
  fault?: 'config' | 'element-write';
  kubernetesTimings?: Record<string, number>;
}): string[] {
  return [join(packageRoot, 'harness', 'agent-with-parts.js'), JSON.stringify(parts)];
}

/**
 * The agent runs as in production: without tap's loaders and coverage hooks. tap's processinfo puts
 * NODE_OPTIONS back into every child's environment, so the command also goes through `env -u`.
 */
export function agentEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) => key !== 'NODE_OPTIONS' && !key.startsWith('_TAPJS_'),
    ),
  );
}

const withoutTap = ['env', '-u', 'NODE_OPTIONS'];

export interface RunningAgent {
  child: ChildProcess;
  logs: Array<Record<string, unknown> & { msg?: string; level?: number }>;
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * A copy of the node binary in `dir`, for an agent that must be the only process mapping its
 * program, as in its container: the kernel leaves alone the pages of a file another process maps
 * too, and a test's or bench's own node maps the same binary (docs/design.md, "Memory").
 */
export function copyOfNode(dir: string): string {
  const node = join(dir, 'node');
  copyFileSync(process.execPath, node); // keeps the source's mode
  return node;
}

/**
 * Starts the agent in ns (optionally under a wrapper such as setpriv, or with another copy of the
 * node binary); SIGKILLed at teardown.
 */
export function startAgent(
  t: TapTest,
  ns: string,
  args: string[],
  wrapper: string[] = [],
  node = process.execPath,
  entry: readonly string[] = [agentBin],
): RunningAgent {
  const child = spawn(
    'ip',
    ['netns', 'exec', ns, ...withoutTap, ...wrapper, node, ...entry, ...args],
    {
      cwd: packageRoot,
      env: agentEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const agent: RunningAgent = {
    child,
    logs: [],
    stderr: [],
    exited: new Promise((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    ),
  };
  let partial = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        agent.logs.push(JSON.parse(line));
      } catch {
        agent.logs.push({ msg: line });
      }
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => agent.stderr.push(chunk.toString('utf8')));
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return agent;
}

/** Runs the agent to completion (e.g. --once, --render) in ns; never rejects. */
export function runAgentOnce(
  ns: string,
  args: string[],
  wrapper: string[] = [],
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      'ip',
      ['netns', 'exec', ns, ...withoutTap, ...wrapper, process.execPath, agentBin, ...args],
      { cwd: packageRoot, env: agentEnv(), timeout: 60_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** Polls until check() returns a value other than undefined, at most timeoutMs. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 10_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** `nft list table` in ns, or null when the table does not exist. */
export async function listTable(
  ns: string,
  family: string,
  table = 'ipmasq',
): Promise<string | null> {
  try {
    return (await inNetns(ns, 'nft', ['list', 'table', family, table])).stdout;
  } catch (err) {
    if (/No such file or directory/.test(String(err))) return null;
    throw err;
  }
}

/**
 * The generation of the latest write: the jump rule's mark, which follows the table's own comment
 * in a listing (that one stays as the table was created; docs/writes.md, "When it writes").
 */
export function generationOf(listing: string | null): number | undefined {
  const marks = listing ? [...listing.matchAll(/ipmasq-agent generation (\d+) /g)] : [];
  const last = marks.at(-1)?.[1];
  return last ? Number(last) : undefined;
}

/**
 * A request to http://127.0.0.1:port/path from inside ns (the tests' one HTTP client): its status
 * and body. Other methods than GET send an empty JSON body.
 */
export async function httpGet(
  ns: string,
  port: number,
  path: string,
  method = 'GET',
): Promise<{ status: number; body: string }> {
  const script =
    'import sys,urllib.request,urllib.error\n' +
    'data=None if sys.argv[2]=="GET" else b"{}"\n' +
    'req=urllib.request.Request(sys.argv[1],method=sys.argv[2],data=data,headers={"content-type":"application/json"})\n' +
    'try:\n r=urllib.request.urlopen(req,timeout=5); print(r.status); print(r.read().decode())\n' +
    'except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode())\n';
  const url = `http://127.0.0.1:${port}${path}`;
  const { stdout } = await inNetns(ns, python, ['-c', script, url, method]);
  const newline = stdout.indexOf('\n');
  return { status: Number(stdout.slice(0, newline)), body: stdout.slice(newline + 1) };
}

export { metricValue } from './prometheus.js';

// Sequential GETs of /healthz (or of the paths given, in turn), each on a new connection as the
// kubelet makes them, until stdin closes or a bound is hit; prints "ready", then one JSON line with
// each request's start (epoch ms) and latency (ms), and the failures.
const HEALTH_PROBE = `
import http.client, json, sys, threading, time
port, max_n, max_s, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
paths = sys.argv[5:] or ["/healthz"]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
samples, failures = [], []
deadline = time.monotonic() + max_s
print("ready", flush=True)
while not stop.is_set() and len(samples) + len(failures) < max_n and time.monotonic() < deadline:
    start, t0 = time.time(), time.perf_counter()
    path = paths[(len(samples) + len(failures)) % len(paths)]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status == 200:
            samples.append([round(start * 1000, 1), round((time.perf_counter() - t0) * 1000, 3)])
        else:
            failures.append("%s: status %d" % (path, response.status))
    except Exception as e:
        failures.append("%s: %r" % (path, e))
    time.sleep(gap)
print(json.dumps({"samples": samples, "failures": failures}), flush=True)
`;

/** What a health probe saw: [start (epoch ms), latency (ms)] per answered request, and failures. */
export interface HealthProbeResult {
  samples: Array<[number, number]>;
  failures: string[];
}

/**
 * Probes /healthz (or `paths`, in turn) on 127.0.0.1:port inside ns, one request after another
 * (gapS apart), until stop() or a bound; resolves once the prober runs. Killed at teardown.
 */
export async function startHealthProbe(
  t: TapTest,
  ns: string,
  port: number,
  bounds: { maxRequests: number; maxSeconds: number; gapS: number },
  paths: readonly string[] = [],
): Promise<{ stop(): Promise<HealthProbeResult> }> {
  const probe = spawn('ip', [
    'netns',
    'exec',
    ns,
    python,
    '-c',
    HEALTH_PROBE,
    String(port),
    String(bounds.maxRequests),
    String(bounds.maxSeconds),
    String(bounds.gapS),
    ...paths,
  ]);
  t.teardown(() => probe.kill('SIGKILL'));
  let output = '';
  probe.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const done = new Promise<void>((resolve) => probe.once('exit', () => resolve()));
  await waitFor('the health probe', () => (output.startsWith('ready') ? true : undefined));
  return {
    async stop() {
      probe.stdin.end();
      await done;
      return JSON.parse(output.slice(output.indexOf('\n') + 1)) as HealthProbeResult;
    },
  };
}

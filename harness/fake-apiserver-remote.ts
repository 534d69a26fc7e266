// A FakeApiServer (fake-apiserver.ts) in a test namespace, where the agent can reach it at
// 127.0.0.1:PORT, driven from the test through a Unix socket. Stopped at teardown.
import http from 'node:http';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { packageRoot, spawnNodeInNetns, tempDir, type TapTest } from './netns.js';
import type { FakeApiServer } from './fake-apiserver.js';

type Methods = {
  [
    K in keyof FakeApiServer as FakeApiServer[K] extends (...args: never[]) => unknown ? K : never
  ]: FakeApiServer[K];
};

export interface RemoteFake {
  readonly url: string;
  readonly token: string;
  readonly kubeconfig: string;
  call<K extends keyof Methods>(
    method: K,
    ...args: Parameters<Methods[K]>
  ): Promise<Awaited<ReturnType<Methods[K]>>>;
  counts(): Promise<Record<string, number>>;
}

export async function startFakeApiServerInNetns(
  t: TapTest,
  ns: string,
  options: { port?: number; bookmarkMs?: number } = {},
): Promise<RemoteFake> {
  const dir = tempDir(t, 'fake-api');
  const control = join(dir, 'control.sock');
  const port = options.port ?? 6443;
  const token = `token-${process.pid}-${Date.now()}`;
  const child = spawnNodeInNetns(ns, join(packageRoot, 'harness/fake-apiserver-main.ts'), [
    String(port),
    control,
    JSON.stringify({ token, ...(options.bookmarkMs ? { bookmarkMs: options.bookmarkMs } : {}) }),
  ]);
  const stderr: string[] = [];
  child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk.toString('utf8')));
  t.teardown(() => {
    child.stdin.end();
    child.kill('SIGKILL');
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`fake API server did not start: ${stderr.join('')}`)),
      30_000,
    );
    child.stdout.on('data', (chunk: Buffer) => {
      if (chunk.toString('utf8').includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`fake API server exited ${code}: ${stderr.join('')}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'current-context: fake',
      'clusters:',
      '- name: fake',
      '  cluster:',
      `    server: ${url}`,
      'contexts:',
      '- name: fake',
      '  context: {cluster: fake, user: agent}',
      'users:',
      '- name: agent',
      `  user: {token: ${token}}`,
      '',
    ].join('\n'),
  );
  const rpc = (method: string, args: unknown[]) =>
    new Promise<unknown>((resolve, reject) => {
      const req = http.request({ socketPath: control, method: 'POST', path: '/call' }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const reply = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
            result?: unknown;
            error?: string;
          };
          if (reply.error) reject(new Error(reply.error));
          else resolve(reply.result);
        });
      });
      req.on('error', reject);
      req.end(JSON.stringify({ method, args }));
    });
  return {
    url,
    token,
    kubeconfig,
    call: (method, ...args) => rpc(method, args) as never,
    counts: () => rpc('counts', []) as Promise<Record<string, number>>,
  };
}

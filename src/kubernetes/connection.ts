// Where the API server is and how to prove who we are (README, "Kubernetes API (opt-in)"): the pod's
// service account (--kubernetes) or a kubeconfig (--kubeconfig). Only the shapes an agent needs are
// read: a server URL, a CA, a bearer token (or token file) or a client certificate.
import { readFile } from 'node:fs/promises';
import { isAbsolute, dirname, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { errorText } from '../errors.js';
import { record } from '../record.js';

export interface Connection {
  readonly server: URL;
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
  readonly insecureSkipTLSVerify?: boolean;
  /** The bearer token to send now (a projected token file is read again as it rotates). */
  readonly token: () => Promise<string | undefined>;
}

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** kubelet rotates projected tokens well before they expire; re-reading every minute follows it. */
const TOKEN_REREAD_MS = 60_000;

/** A projected token file, read again once its last read is TOKEN_REREAD_MS old (by `clock`). */
export function tokenFile(path: string, clock = Date.now): () => Promise<string | undefined> {
  let cached: { at: number; token: string } | undefined;
  return async () => {
    const now = clock();
    if (cached && now - cached.at < TOKEN_REREAD_MS) return cached.token;
    const token = (await readFile(path, 'utf8')).trim();
    cached = { at: now, token };
    return token;
  };
}

export class ConnectionError extends Error {
  override name = 'ConnectionError';
}

async function must(path: string, what: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new ConnectionError(`${what} ${path}: ${errorText(err)}`);
  }
}

/** The pod's service account: KUBERNETES_SERVICE_HOST/PORT, its CA and its token. */
export async function inCluster(
  env: Readonly<Record<string, string | undefined>> = process.env,
  dir = SERVICE_ACCOUNT_DIR,
): Promise<Connection> {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new ConnectionError(
      '--kubernetes: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not running in a pod? use --kubeconfig)',
    );
  }
  const ca = await must(join(dir, 'ca.crt'), "--kubernetes: the service account's CA");
  const token = tokenFile(join(dir, 'token'));
  try {
    await token();
  } catch (err) {
    throw new ConnectionError(`--kubernetes: the service account's token: ${errorText(err)}`);
  }
  const hostPart = host.includes(':') ? `[${host}]` : host;
  return { server: new URL(`https://${hostPart}:${port}`), ca, token };
}

function findNamed(
  list: unknown,
  name: unknown,
  what: string,
  key: string,
): Record<string, unknown> {
  const found: unknown = (Array.isArray(list) ? list : []).find(
    (entry) => record(entry).name === name,
  );
  if (!found) throw new ConnectionError(`--kubeconfig: no ${what} named ${String(name)}`);
  return record(record(found)[key]);
}

/** The current context of a kubeconfig: its cluster's server and CA, its user's credentials. */
export async function fromKubeconfig(path: string): Promise<Connection> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConnectionError(`--kubeconfig ${path}: ${errorText(err)}`);
  }
  let doc: Record<string, unknown>;
  try {
    doc = record(parseYaml(text, { maxAliasCount: 100 }));
  } catch (err) {
    throw new ConnectionError(`--kubeconfig ${path}: not YAML: ${errorText(err)}`);
  }
  const base = dirname(path);
  const resolve = (file: string) => (isAbsolute(file) ? file : join(base, file));
  const contextName = doc['current-context'];
  if (typeof contextName !== 'string' || contextName === '')
    throw new ConnectionError(`--kubeconfig ${path}: no current-context`);
  const context = findNamed(doc.contexts, contextName, 'context', 'context');
  const cluster = findNamed(doc.clusters, context.cluster, 'cluster', 'cluster');
  const user = context.user === undefined ? {} : findNamed(doc.users, context.user, 'user', 'user');

  if (typeof cluster.server !== 'string')
    throw new ConnectionError(`--kubeconfig ${path}: the cluster has no server`);
  let server: URL;
  try {
    server = new URL(cluster.server);
  } catch {
    throw new ConnectionError(`--kubeconfig ${path}: server ${cluster.server} is not a URL`);
  }
  if (server.protocol !== 'https:' && server.protocol !== 'http:')
    throw new ConnectionError(`--kubeconfig ${path}: server ${cluster.server} is not http(s)`);

  const bytes = async (dataKey: string, fileKey: string, from: Record<string, unknown>) => {
    const data = from[dataKey];
    if (typeof data === 'string') return Buffer.from(data, 'base64');
    const file = from[fileKey];
    if (typeof file === 'string') return must(resolve(file), `--kubeconfig: ${fileKey}`);
    return undefined;
  };
  if (user.exec !== undefined || user['auth-provider'] !== undefined) {
    throw new ConnectionError(
      `--kubeconfig ${path}: exec and auth-provider credentials are not supported; give a token, a token file or a client certificate`,
    );
  }
  const ca = await bytes('certificate-authority-data', 'certificate-authority', cluster);
  const cert = await bytes('client-certificate-data', 'client-certificate', user);
  const key = await bytes('client-key-data', 'client-key', user);
  let token: () => Promise<string | undefined> = async () => undefined;
  if (typeof user.token === 'string') {
    const fixed = user.token;
    token = async () => fixed;
  } else if (typeof user.tokenFile === 'string') token = tokenFile(resolve(user.tokenFile));
  return {
    server,
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
    ...(cluster['insecure-skip-tls-verify'] === true ? { insecureSkipTLSVerify: true } : {}),
    token,
  };
}

// Where the API server is and how to prove who we are (docs/kubernetes.md, "Kubernetes API
// (opt-in)"): the pod's service account (--kubernetes) or a kubeconfig (--kubeconfig). Only the
// shapes an agent needs are read: a server URL, a CA, a bearer token (or token file) or a client
// certificate.
import { readFile, stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { errorText } from '../errors.js';
import { record } from '../record.js';

/**
 * The TLS material of a connection as it is now: each file-backed part read again as it changes.
 */
export interface TlsMaterial {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

export interface Connection {
  readonly server: URL;
  /** The CA, client certificate and key now (a replaced file is read again within a second). */
  readonly tls: () => Promise<TlsMaterial>;
  readonly insecureSkipTLSVerify?: boolean;
  /**
   * The Authorization header to send now (a rotated token file is read again within a second);
   * `fresh` after a 401: the credential read again at once.
   */
  readonly authorization: (fresh?: boolean) => Promise<string | undefined>;
}

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** How often a credential file is looked at (one stat) for a change. */
const FILE_LOOK_MS = 1_000;

/**
 * A file that may be replaced while the agent runs (kubelet rotates a projected token by swapping
 * a symlink; a CA bundle is replaced): read again when its inode, size or modification time
 * changed, looked at at most once per FILE_LOOK_MS by `clock`, or at once when asked (`fresh`).
 * A failed read keeps the content last read; only the first read's failure is thrown.
 */
export function watchedFile(path: string, clock = Date.now): (fresh?: boolean) => Promise<Buffer> {
  let last: { content: Buffer; stamp: string } | undefined;
  let lookedAt = -Infinity;
  return async (fresh = false) => {
    const now = clock();
    if (last && !fresh && now - lookedAt < FILE_LOOK_MS) return last.content;
    lookedAt = now;
    try {
      const info = await stat(path);
      const stamp = `${info.ino}:${info.size}:${info.mtimeMs}`;
      if (last && !fresh && stamp === last.stamp) return last.content;
      last = { content: await readFile(path), stamp };
      return last.content;
    } catch (err) {
      if (last) return last.content;
      throw err;
    }
  };
}

/** A token file (trimmed), as watchedFile reads it. */
export function tokenFile(path: string, clock = Date.now): (fresh?: boolean) => Promise<string> {
  const file = watchedFile(path, clock);
  return async (fresh) => (await file(fresh)).toString('utf8').trim();
}

const bearer = (token: string | undefined) => (token ? `Bearer ${token}` : undefined);

export class ConnectionError extends Error {
  override name = 'ConnectionError';
}

/**
 * A kubeconfig asks for something the agent does not do (docs/kubernetes.md, "Kubernetes API
 * (opt-in)"): refused at start with exit 2, as a bad flag is, never followed halfway or ignored.
 */
export class UnsupportedKubeconfig extends ConnectionError {
  override name = 'UnsupportedKubeconfig';
}

/** A file the connection keeps reading as it changes; its first read must succeed. */
async function followed(path: string, what: string): Promise<() => Promise<Buffer>> {
  const file = watchedFile(path);
  try {
    await file();
  } catch (err) {
    throw new ConnectionError(`${what} ${path}: ${errorText(err)}`);
  }
  return file;
}

/** TLS material from its sources, each read now. */
function tlsOf(sources: {
  ca?: () => Promise<Buffer>;
  cert?: () => Promise<Buffer>;
  key?: () => Promise<Buffer>;
}): () => Promise<TlsMaterial> {
  return async () => {
    const [ca, cert, key] = await Promise.all([sources.ca?.(), sources.cert?.(), sources.key?.()]);
    return { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
  };
}

/**
 * --kubernetes: the pod's service account (KUBERNETES_SERVICE_HOST/PORT, its CA and its token,
 * both read again as kubelet replaces them); outside a pod, the kubeconfig KUBECONFIG names, as
 * kubectl would take it.
 */
export async function inCluster(
  env: Readonly<Record<string, string | undefined>> = process.env,
  dir = SERVICE_ACCOUNT_DIR,
): Promise<Connection> {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    if (env.KUBECONFIG) return fromKubeconfig(env.KUBECONFIG, 'KUBECONFIG');
    throw new ConnectionError(
      "--kubernetes: neither KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (the pod's service account) nor KUBECONFIG is set (not running in a pod? use --kubeconfig)",
    );
  }
  const ca = await followed(join(dir, 'ca.crt'), "--kubernetes: the service account's CA");
  const token = tokenFile(join(dir, 'token'));
  try {
    await token();
  } catch (err) {
    throw new ConnectionError(`--kubernetes: the service account's token: ${errorText(err)}`);
  }
  const hostPart = host.includes(':') ? `[${host}]` : host;
  return {
    server: new URL(`https://${hostPart}:${port}`),
    tls: tlsOf({ ca }),
    authorization: async (fresh) => bearer(await token(fresh)),
  };
}

/** One named entry of a kubeconfig, with the directory its relative paths are read from. */
interface Entry {
  readonly value: Record<string, unknown>;
  readonly base: string;
}

/** Fields a kubeconfig may hold that the agent does not follow: refused, never silently ignored. */
const REFUSED: Readonly<Record<string, string>> = {
  exec: 'exec credential plugins',
  'auth-provider': 'auth-provider credentials',
  as: 'impersonation (as)',
  'as-uid': 'impersonation (as-uid)',
  'as-groups': 'impersonation (as-groups)',
  'as-user-extra': 'impersonation (as-user-extra)',
  'proxy-url': 'proxy-url (an HTTP proxy)',
  'tls-server-name': 'tls-server-name (a server name other than the URL names)',
};

/**
 * The current context of a kubeconfig. One file: a list (`a:b`, as KUBECONFIG may give one) is
 * refused, since kubectl's merge of several would be followed by nothing else the agent does.
 * Relative paths are read from the directory of the file.
 */
export async function fromKubeconfig(paths: string, flag = '--kubeconfig'): Promise<Connection> {
  const files = paths.split(delimiter).filter((p) => p !== '');
  if (files.length !== 1) {
    throw new UnsupportedKubeconfig(
      `${flag} ${paths}: several kubeconfig files are not supported (kubectl merges them); give one`,
    );
  }
  const where = `${flag} ${paths}`;
  const { cluster, user } = await currentContext(files[0]!, flag, where);
  for (const [field, what] of Object.entries(REFUSED)) {
    if (user.value[field] !== undefined || cluster.value[field] !== undefined) {
      throw new UnsupportedKubeconfig(
        `${where}: ${field}: ${what} is not supported; give a token, a token file, a username and password or a client certificate, and reach the server directly`,
      );
    }
  }
  const server = serverOf(cluster, where);
  const ca = await credential('certificate-authority-data', 'certificate-authority', cluster);
  const cert = await credential('client-certificate-data', 'client-certificate', user);
  const key = await credential('client-key-data', 'client-key', user);
  return {
    server,
    tls: tlsOf({ ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) }),
    ...(cluster.value['insecure-skip-tls-verify'] === true ? { insecureSkipTLSVerify: true } : {}),
    authorization: authorizationOf(user),
  };
}

/** The kubeconfig's current context's cluster and user (an empty user when it names none). */
async function currentContext(
  path: string,
  flag: string,
  where: string,
): Promise<{ cluster: Entry; user: Entry }> {
  const named = {
    clusters: new Map<string, Entry>(),
    contexts: new Map<string, Entry>(),
    users: new Map<string, Entry>(),
  };
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConnectionError(`${flag} ${path}: ${errorText(err)}`);
  }
  let doc: Record<string, unknown>;
  try {
    doc = record(parseYaml(text, { maxAliasCount: 100 }));
  } catch (err) {
    throw new ConnectionError(`${flag} ${path}: not YAML: ${errorText(err)}`);
  }
  const current = doc['current-context'];
  const contextName = typeof current === 'string' && current !== '' ? current : undefined;
  for (const kind of ['clusters', 'contexts', 'users'] as const) {
    const list: unknown[] = Array.isArray(doc[kind]) ? (doc[kind] as unknown[]) : [];
    for (const item of list) {
      const name = record(item).name;
      const key = kind.slice(0, -1);
      if (typeof name === 'string' && !named[kind].has(name))
        named[kind].set(name, { value: record(record(item)[key]), base: dirname(path) });
    }
  }
  if (contextName === undefined) throw new ConnectionError(`${where}: no current-context`);
  const find = (kind: keyof typeof named, name: unknown): Entry => {
    const entry = typeof name === 'string' ? named[kind].get(name) : undefined;
    if (!entry)
      throw new ConnectionError(`--kubeconfig: no ${kind.slice(0, -1)} named ${String(name)}`);
    return entry;
  };
  const context = find('contexts', contextName).value;
  const cluster = find('clusters', context.cluster);
  const user: Entry =
    context.user === undefined ? { value: {}, base: '.' } : find('users', context.user);
  return { cluster, user };
}

/** The cluster's server, an http(s) URL. */
function serverOf(cluster: Entry, where: string): URL {
  const serverText = cluster.value.server;
  if (typeof serverText !== 'string')
    throw new ConnectionError(`${where}: the cluster has no server`);
  let server: URL;
  try {
    server = new URL(serverText);
  } catch {
    throw new ConnectionError(`${where}: server ${serverText} is not a URL`);
  }
  if (server.protocol !== 'https:' && server.protocol !== 'http:')
    throw new ConnectionError(`${where}: server ${serverText} is not http(s)`);
  return server;
}

/** A certificate or key given inline (`…-data`, base64) or as a file, relative to its kubeconfig. */
async function credential(dataKey: string, fileKey: string, from: Entry) {
  const data = from.value[dataKey];
  if (typeof data === 'string') {
    const fixed = Buffer.from(data, 'base64');
    return async () => fixed;
  }
  const file = from.value[fileKey];
  if (typeof file !== 'string') return undefined;
  return followed(isAbsolute(file) ? file : join(from.base, file), `--kubeconfig: ${fileKey}`);
}

/** The user's Authorization header: a token, a token file read again when asked fresh, or basic. */
function authorizationOf(user: Entry): (fresh?: boolean) => Promise<string | undefined> {
  const { token, tokenFile: tokenPath, username, password } = user.value;
  if (typeof token === 'string') return async () => bearer(token);
  if (typeof tokenPath === 'string') {
    const read = tokenFile(isAbsolute(tokenPath) ? tokenPath : join(user.base, tokenPath));
    return async (fresh) => bearer(await read(fresh));
  }
  if (typeof username === 'string' && typeof password === 'string') {
    const basic = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
    return async () => basic;
  }
  return async () => undefined;
}

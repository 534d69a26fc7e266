// What the agent would read of a ConfigMap once mounted (docs/explain.md, "Explain, diff, check"):
// the keys a workload's configMap volume presents as files, and which of them its --config path
// names — one file (the shipped DaemonSet mounts key `config` as /etc/config/ip-masq-agent) or a
// directory whose ip-masq* files are merged.
import { posix } from 'node:path';
import { escapeUnprintable } from '../cidr/index.js';
import { record } from '../record.js';
import { DEFAULT_CONFIG_PATH, FILE_PREFIX } from './source.js';

export type Manifest = ReadonlyArray<Record<string, unknown>>;

/** One ConfigMap as the agent would see it. */
export interface Mounted {
  /** `ConfigMap NAMESPACE/NAME`. */
  readonly name: string;
  /** name, and how it is mounted, for the "checked" list. */
  readonly shown: string;
  /** The files the agent reads, in the order it merges them. */
  readonly files: ReadonlyArray<{ readonly key: string; readonly text: unknown }>;
  readonly errors: readonly string[];
  readonly warnings: readonly string[];
}

/** deploy/kubernetes/daemonset.yaml's volume: key config at /etc/config/ip-masq-agent. */
const SHIPPED: Mount = {
  by: 'the shipped DaemonSet',
  mountPath: '/etc/config',
  items: [{ key: 'config', path: 'ip-masq-agent' }],
  config: DEFAULT_CONFIG_PATH,
};

interface Mount {
  /** Who mounts it: `DaemonSet kube-system/ip-masq-agent container agent`. */
  readonly by: string;
  readonly mountPath: string;
  /** The volume's items (key → file), or undefined: every key as a file of its own name. */
  readonly items?: ReadonlyArray<{ readonly key: string; readonly path: string }>;
  /** The volumeMount's subPath: one file mounted at mountPath itself. */
  readonly subPath?: string;
  /** The container's --config, or the agent's default. */
  readonly config: string;
}

const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const text = (value: unknown): string | undefined =>
  typeof value === 'string' ? value : undefined;

/** Objects of a manifest, List items unwrapped. */
export function objects(value: unknown): Array<Record<string, unknown>> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return [];
  const object = value as Record<string, unknown>;
  if (object.kind === 'List' && Array.isArray(object.items)) return object.items.flatMap(objects);
  return [object];
}

const namespaceOf = (object: Record<string, unknown>) => text(record(object.metadata).namespace);
const nameOf = (object: Record<string, unknown>) => text(record(object.metadata).name);

/** NAME matches in any namespace (kubectl's decides), NAMESPACE/NAME only there. */
function selected(object: Record<string, unknown>, wanted: readonly string[]): boolean {
  const name = nameOf(object);
  const namespace = namespaceOf(object);
  return wanted.some((w) => {
    const slash = w.indexOf('/');
    if (slash < 0) return w === name;
    return (
      w.slice(slash + 1) === name && (namespace === undefined || w.slice(0, slash) === namespace)
    );
  });
}

/** The value of --config (any spelling flags.ts accepts) in a container's command and args. */
function configFlag(argv: readonly string[]): string {
  let config = DEFAULT_CONFIG_PATH;
  for (let i = 0; i < argv.length; i++) {
    const match = /^--?config(?:=(.*))?$/s.exec(argv[i] as string);
    if (!match) continue;
    const value = match[1] ?? argv[i + 1];
    if (value !== undefined) config = value;
  }
  return config;
}

/** The pod spec of a workload (a Pod, or anything with spec.template). */
function podSpec(object: Record<string, unknown>): Record<string, unknown> | undefined {
  if (object.kind === 'Pod') return record(object.spec);
  const template = record(record(object.spec).template);
  return 'spec' in template ? record(template.spec) : undefined;
}

/** Every mount of ConfigMap `name` in namespace `namespace` by a workload of the manifest. */
function mountsBy(manifest: Manifest, name: string, namespace: string | undefined): Mount[] {
  const mounts: Mount[] = [];
  for (const object of manifest) {
    const spec = podSpec(object);
    if (!spec || namespaceOf(object) !== namespace) continue;
    const volumes = new Map<string, Record<string, unknown>>();
    for (const volume of list(spec.volumes).map(record)) {
      const configMap = record(volume.configMap);
      if (text(configMap.name) === name && text(volume.name))
        volumes.set(text(volume.name)!, configMap);
    }
    if (volumes.size === 0) continue;
    const containers = [...list(spec.initContainers), ...list(spec.containers)].map(record);
    for (const container of containers) {
      for (const volumeMount of list(container.volumeMounts).map(record)) {
        const volume = volumes.get(text(volumeMount.name) ?? '');
        const mountPath = text(volumeMount.mountPath);
        if (!volume || mountPath === undefined) continue;
        const argv = [...list(container.command), ...list(container.args)].filter(
          (a): a is string => typeof a === 'string',
        );
        const items = list(volume.items)
          .map(record)
          .flatMap((item) => {
            const key = text(item.key);
            const path = text(item.path);
            return key !== undefined && path !== undefined ? [{ key, path }] : [];
          });
        const subPath = text(volumeMount.subPath);
        mounts.push({
          by: `${String(object.kind)} ${namespace ?? 'default'}/${nameOf(object) ?? '(no name)'} container ${text(container.name) ?? '(no name)'}`,
          mountPath: posix.normalize(mountPath),
          ...(Array.isArray(volume.items) ? { items } : {}),
          ...(subPath ? { subPath } : {}),
          config: posix.normalize(configFlag(argv)),
        });
      }
    }
  }
  return mounts;
}

/** What `mount` presents of `data` to a container whose --config is mount.config. */
function read(name: string, data: Record<string, unknown>, mount: Mount): Mounted {
  const files = mount.items ?? Object.keys(data).map((key) => ({ key, path: key }));
  const errors: string[] = [];
  const at = (path: string) => posix.join(mount.mountPath, path);
  const shown = (how: string) => `${name} ${how} (as ${escapeUnprintable(mount.by)} mounts it)`;
  const missing = (key: string, path: string) =>
    `${name}: it has no key ${escapeUnprintable(key)}, which ${escapeUnprintable(mount.by)} mounts as ${escapeUnprintable(path)}`;
  const single = (key: string): Mounted => {
    const present = Object.hasOwn(data, key);
    if (!present) errors.push(missing(key, mount.config));
    const ignored = Object.keys(data).filter((k) => k !== key);
    return {
      name,
      shown: shown(`key ${escapeUnprintable(key)}`),
      files: present ? [{ key, text: data[key] }] : [],
      errors,
      warnings: ignored.length
        ? [
            `${name}: key${ignored.length > 1 ? 's' : ''} ${ignored.map(escapeUnprintable).join(', ')} not read: ` +
              `the agent reads only ${escapeUnprintable(mount.config)} (key ${escapeUnprintable(key)})`,
          ]
        : [],
    };
  };
  if (mount.subPath !== undefined) {
    const file = files.find((f) => posix.normalize(f.path) === posix.normalize(mount.subPath!));
    if (mount.config === mount.mountPath && file) return single(file.key);
  } else {
    const file = files.find((f) => at(f.path) === mount.config);
    if (file) return single(file.key);
    if (mount.config === mount.mountPath) {
      // Directory mode: the top-level files named ip-masq*, merged in name order.
      const merged = files
        .filter((f) => !f.path.includes('/') && f.path.startsWith(FILE_PREFIX))
        .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
      for (const f of merged)
        if (!Object.hasOwn(data, f.key)) errors.push(missing(f.key, at(f.path)));
      const read = merged.filter((f) => Object.hasOwn(data, f.key));
      return {
        name,
        shown: shown(
          `as a directory of ${read.length} ip-masq* file${read.length === 1 ? '' : 's'}`,
        ),
        files: read.map((f) => ({ key: f.key, text: data[f.key] })),
        errors,
        warnings: [],
      };
    }
  }
  errors.push(
    `${name}: ${escapeUnprintable(mount.by)} reads --config ${escapeUnprintable(mount.config)}, which is not in this ConfigMap's mount at ${escapeUnprintable(mount.mountPath)}: the agent would use its defaults`,
  );
  return { name, shown: shown('not read'), files: [], errors, warnings: [] };
}

/**
 * The chosen ConfigMaps of a manifest, each as every workload of the manifest that mounts it would
 * present it, or as the shipped DaemonSet would when none does.
 */
export function mountsOf(manifest: Manifest, wanted: readonly string[]): Mounted[] {
  const result: Mounted[] = [];
  for (const object of manifest) {
    if (object.kind !== 'ConfigMap' || !selected(object, wanted)) continue;
    const namespace = namespaceOf(object);
    const name = `ConfigMap ${escapeUnprintable(`${namespace ?? 'default'}/${nameOf(object) ?? ''}`)}`;
    const data = record(object.data);
    const mounts = mountsBy(manifest, nameOf(object) ?? '', namespace);
    for (const mount of mounts.length ? mounts : [SHIPPED]) result.push(read(name, data, mount));
  }
  return result;
}

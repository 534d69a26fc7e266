#!/usr/bin/env node
// Makes a fresh Debian/Ubuntu machine ready to run or test the agent, and does nothing where all is
// present: system packages (as root, via apt-get), npm dependencies, the addon, the TypeScript
// build.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd, args, env = {}, quiet = false) =>
  execFileSync(cmd, args, {
    cwd: root,
    stdio: ['ignore', quiet ? 'ignore' : 'inherit', 'inherit'],
    env: { ...process.env, ...env },
  });
const has = (cmd) => {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

// What the agent, its build and its tests use from the system, as [check, Debian package].
const needs = [
  [() => has('nft'), 'nftables'],
  [() => existsSync('/usr/include/nftables/libnftables.h'), 'libnftables-dev'],
  [
    () => existsSync('/usr/include/libnetfilter_conntrack/libnetfilter_conntrack.h'),
    'libnetfilter-conntrack-dev',
  ],
  [() => has('conntrack'), 'conntrack'], // the conntrack tests count entries with it
  [() => has('promtool'), 'prometheus'], // promtool checks the metrics, alerts and dashboard
  [() => has('ip'), 'iproute2'],
  [() => has('iptables-nft'), 'iptables'],
  [() => has('clang-format'), 'clang-format'],
  [() => has('python3'), 'python3'],
  [() => has('sysctl'), 'procps'], // the test topology sets forwarding and DAD per namespace
  [() => has('make') && has('g++'), 'build-essential'],
];
// The tests' own: runc for the test node (docs/development.md, "A real node") is built with
// seccomp, as the DaemonSet asks for RuntimeDefault.
// The agent's image the node runs is built from deploy/Dockerfile with podman (runc: crun cannot set
// its limits here), from base images made with debootstrap (scripts/node-base.sh).
if (process.argv.includes('--tests'))
  needs.push(
    [() => existsSync('/usr/include/seccomp.h'), 'libseccomp-dev'],
    [() => has('podman'), 'podman'],
    [() => has('buildah'), 'buildah'],
    [() => has('runc'), 'runc'],
    [() => has('debootstrap'), 'debootstrap'],
  );
const missing = needs.filter(([present]) => !present()).map(([, pkg]) => pkg);
if (missing.length > 0) {
  if (process.getuid?.() !== 0) {
    console.error(`setup: missing system packages: ${missing.join(' ')}; install them as root:`);
    console.error(`  apt-get update && apt-get install -y ${missing.join(' ')}`);
    process.exit(1);
  }
  console.error(`setup: installing ${missing.join(' ')} with apt-get`);
  run('apt-get', ['update', '-qq']);
  run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
    DEBIAN_FRONTEND: 'noninteractive',
  });
}

const mtime = (p) => (existsSync(p) ? statSync(p).mtimeMs : 0);
const newest = (dir) => {
  let latest = 0;
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true, recursive: true })) {
    if (entry.isFile())
      latest = Math.max(latest, mtime(join(entry.parentPath ?? entry.path, entry.name)));
  }
  return latest;
};

// npm records what it installed in node_modules/.package-lock.json; reinstall when the lock is
// newer.
if (mtime(join(root, 'node_modules/.package-lock.json')) < mtime(join(root, 'package-lock.json'))) {
  console.error('setup: npm ci');
  run('npm', ['ci', '--no-audit', '--no-fund']);
}

// Node's own headers, where they are on disk (Debian's libnode-dev, the official tarball's
// include/): building against them means node-gyp never tries to download them, which an offline
// machine cannot.
const nodePrefix = dirname(dirname(process.execPath));
const nodedir = [nodePrefix, '/usr', '/usr/local'].find((dir) =>
  existsSync(join(dir, 'include/node/node_api.h')),
);

const addon = join(root, 'build/Release/nftables_napi.node');
if (mtime(addon) < Math.max(newest('native'), mtime(join(root, 'binding.gyp')))) {
  console.error('setup: building the nftables_napi addon');
  run('npx', ['--no-install', 'node-gyp', 'rebuild', ...(nodedir ? [`--nodedir=${nodedir}`] : [])]);
}

const built = join(root, 'dist/cli.js');
if (mtime(built) < Math.max(newest('src'), mtime(join(root, 'tsconfig.json')))) {
  console.error('setup: compiling TypeScript');
  run('npx', ['--no-install', 'tsc', '-p', 'tsconfig.build.json']);
}

// For the tests (`--tests`, what `npm test` passes): the real control plane the Kubernetes tests
// run against, and the node's binaries and helm (test/node), built once per machine with its Go
// (minutes the first time; docs/development.md, "Tests against a real API server" and "A real
// node"), found in their cache after that.
if (process.argv.includes('--tests')) {
  run('bash', [join(root, 'scripts/control-plane.sh'), 'build'], {}, true);
  run('bash', [join(root, 'scripts/node.sh'), 'build'], {}, true);
}

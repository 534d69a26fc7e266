#!/usr/bin/env node
// Prints the version of the libnftables the addon builds against (binding.gyp defines it), from
// pkg-config when present, else from libnftables.pc where libnftables-dev puts it; `unknown` if neither.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

function fromPkgConfig() {
  try {
    return execFileSync('pkg-config', ['--modversion', 'libnftables'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return '';
  }
}

function fromPcFile() {
  const dirs = ['/usr/lib', '/usr/lib64', '/usr/share'].flatMap((top) => [
    join(top, 'pkgconfig'),
    ...(existsSync(top) ? readdirSync(top).map((arch) => join(top, arch, 'pkgconfig')) : []),
  ]);
  for (const dir of dirs) {
    const file = join(dir, 'libnftables.pc');
    if (!existsSync(file)) continue;
    const match = /^Version:\s*(\S+)/m.exec(readFileSync(file, 'utf8'));
    if (match) return match[1];
  }
  return '';
}

const version = fromPkgConfig() || fromPcFile() || 'unknown';
process.stdout.write(/^[0-9A-Za-z.+~-]+$/.test(version) ? version : 'unknown');

// The TypeScript modules of src/, by their path under it: what the repo tests read (the design's
// floors and claims, the environment's readers, the kernel's ports, function lengths).
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { packageRoot } from '../../harness/netns.js';

export const SRC = join(packageRoot, 'src');

/** Every .ts file under `folder` (src/ unless given), by its path under src/. */
export function srcModules(folder: string = SRC): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(folder)) {
    const path = join(folder, entry);
    if (statSync(path).isDirectory()) found.push(...srcModules(path));
    else if (entry.endsWith('.ts')) found.push(relative(SRC, path));
  }
  return found;
}

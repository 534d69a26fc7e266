// The red team's look-heavy neighbour (issue 51, item 1), for the test and the bench alike: another
// table with a large plain interval set and four nat postrouting base chains sharing one jumped chain
// that masquerades, and a writer replacing that chain's rule every second, so that every look at
// other NAT prints it again (libnftables downloading the set each time).
import { inNetns } from './netns.js';

/** The table: `size` /30s from 172.0.0.0 in set `big`, chain `masqit`, base chains p1–p4. */
export function lookHeavyTable(size: number): string {
  const elements: string[] = [];
  for (let i = 0; i < size; i++) {
    const a = ((172 << 24) | (i * 4)) >>> 0;
    elements.push(`${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}/30`);
  }
  const bases = [1, 2, 3, 4]
    .map(
      (i) =>
        `  chain p${i} {\n    type nat hook postrouting priority srcnat + ${i}; policy accept;\n    jump masqit\n  }\n`,
    )
    .join('');
  return (
    `table ip other {\n  set big {\n    type ipv4_addr; flags interval\n` +
    `    elements = { ${elements.join(',\n')} }\n  }\n` +
    `  chain masqit {\n    ip saddr 10.244.0.0/16 masquerade\n  }\n${bases}}\n`
  );
}

/** Replaces `masqit`'s rule (a new handle) every second in `ns` until stopped; stop() says how often. */
export function startRuleWriter(ns: string): { stop(): Promise<number> } {
  let writing = true;
  let rewrites = 0;
  const writer = (async () => {
    while (writing) {
      await inNetns(ns, 'nft', ['-f', '-'], {
        input:
          'flush chain ip other masqit\nadd rule ip other masqit ip saddr 10.244.0.0/16 masquerade\n',
        timeoutMs: 60_000,
      });
      rewrites++;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  })();
  return {
    async stop() {
      writing = false;
      await writer;
      return rewrites;
    },
  };
}

/**
 * The red team's wide neighbour (issue 51, item 6): one nat postrouting base chain jumping to `count`
 * chains, each returning one /32 (the last one masquerades), in table `wide`.
 */
export function wideTable(count: number): string {
  const chains: string[] = [];
  const jumps: string[] = [];
  for (let i = 0; i < count; i++) {
    const last = i === count - 1;
    chains.push(
      `  chain c${i} {\n    ${last ? 'ip saddr 10.244.0.0/16 masquerade' : `ip daddr 198.18.${(i >> 8) & 255}.${i & 255} return`}\n  }\n`,
    );
    jumps.push(`    jump c${i}\n`);
  }
  return (
    `table ip wide {\n${chains.join('')}  chain post {\n` +
    `    type nat hook postrouting priority srcnat + 5; policy accept;\n${jumps.join('')}  }\n}\n`
  );
}

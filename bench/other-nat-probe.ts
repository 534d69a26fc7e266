// Run inside a bench namespace by bench/other-nat.ts: the look at other tables' nat chains the agent
// makes at start and at each resync (src/other-nat/chains.ts), timed: the first look (wall time:
// it may print rules through a libnftables child) and the CPU of each later, idle one.
import { nftKernel } from '../src/kernel/kernel.js';
import { scanNatChains, type ListingCache, type NatScan } from '../src/other-nat/chains.js';
import { findingsOf, readLegacyNat } from '../src/other-nat/watch.js';

const looks = Number(process.argv[2] ?? 50);
const cache: ListingCache = new Map();
const ours = (family: string, table: string) =>
  (family === 'ip' || family === 'ip6') && table === 'ipmasq';
// As the agent's watch looks: the last scan given, reused while nobody committed.
let last: NatScan | undefined;
const look = async () => {
  last = await scanNatChains(nftKernel, ours, cache, last ? { last } : {});
  return findingsOf(last, await readLegacyNat());
};

const started = performance.now();
const findings = await look();
const firstMs = performance.now() - started;
const cpuMs: number[] = [];
for (let i = 0; i < looks; i++) {
  const before = process.cpuUsage();
  await look();
  const used = process.cpuUsage(before);
  cpuMs.push((used.user + used.system) / 1000);
}
cpuMs.sort((a, b) => a - b);
console.log(
  JSON.stringify({
    findings: findings.length,
    firstMs,
    idleCpuMs: cpuMs[Math.floor(cpuMs.length / 2)],
    idleCpuP99Ms: cpuMs[Math.min(cpuMs.length - 1, Math.floor(cpuMs.length * 0.99))],
  }),
);

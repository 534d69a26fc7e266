// The data path measurements of docs/bench.md: cost per new flow through the node
// namespace, destination not exempt, with our table, the original agent's linear iptables-nft
// chain, and concatenated-range variants of our table, against no NAT table at all.
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  probeSource,
  python,
  REMOTE_TARGETS_IPV4,
  type Topology,
} from '../harness/topology.js';
import { median, tempDir, timedIn, timedInside, withScope } from './harness.js';
import { CONCAT_LAYOUTS, linearChainScript, renderScript, SINK_SCRIPT } from './scripts.js';

const senderScript = join(dirname(fileURLToPath(import.meta.url)), 'sender.py');
const DESTINATION = REMOTE_TARGETS_IPV4.outsideDefaultsA;
/** 10.9.0.0/24 is the 1 153rd /24 of scripts.cidrs(): exempt from that size on. */
const EXEMPT_DESTINATION = REMOTE_TARGETS_IPV4.private10;
const EXEMPT_FROM_SIZE = 1_153;

export const OURS = 'ours: interval set';
/**
 * The same table with the decisions' counting statements taken out (docs/observability.md, "What
 * the node's NAT does").
 */
export const UNCOUNTED = 'ours, decisions not counted';
/**
 * The egress policy's matches before the decision (docs/egress-policy.md, "Egress policy"): both
 * pass for the pod.
 */
export const EGRESS = 'ours + sourceCIDRs, egressInterfaces';
export const SNAT = 'ours + snatAddress';
const EGRESS_POLICY = 'sourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0, "ens*"]\n';
export const LINEAR = 'original: iptables-nft linear chain';
export const concatName = (name: string) => `concat set (${name})`;

export interface FlowRow {
  layout: string;
  cidrs: number;
  /** Per new flow as the pod's sender sees it: median over the rounds of each run's median batch. */
  perFlowUs: number;
  /** The median over the rounds of each run minus a baseline with no NAT table, measured just before. */
  netUs: number;
  /** Time to load this ruleset into the node (nft -f / iptables-nft-restore). */
  loadMs: number;
  flowsPerBatch: number;
}

export interface DataPathResults {
  /** When measured, if apart from the rest of the bench (`--only flows`). */
  date?: string;
  baselineUs: number;
  baselines: number[];
  rows: FlowRow[];
}

interface Layout {
  name: string;
  /** Writes the ruleset file for `count` CIDRs; returns [command, args]. */
  prepare(dir: string, count: number): Promise<[string, string[]]>;
}

function layouts(): Layout[] {
  const nftFile = async (dir: string, name: string, text: string): Promise<[string, string[]]> => {
    const file = join(dir, name);
    await writeFile(file, text);
    return ['nft', ['-f', file]];
  };
  return [
    { name: OURS, prepare: async (dir, count) => nftFile(dir, 'ours.nft', renderScript(count)) },
    {
      name: UNCOUNTED,
      prepare: async (dir, count) =>
        nftFile(dir, 'uncounted.nft', renderScript(count).replace(/counter name "\w+" /g, '')),
    },
    {
      name: LINEAR,
      prepare: async (dir, count) => {
        const file = join(dir, 'linear.rules');
        await writeFile(file, linearChainScript(count));
        return ['iptables-nft-restore', [file]];
      },
    },
    {
      name: EGRESS,
      prepare: async (dir, count) =>
        nftFile(dir, 'egress.nft', renderScript(count, 0, 'interval', EGRESS_POLICY)),
    },
    {
      // To the node's own address: the sink needs no route back for it.
      name: SNAT,
      prepare: async (dir, count) =>
        nftFile(dir, 'snat.nft', renderScript(count, 0, 'interval', `snatAddress: ${NODE_IPV4}\n`)),
    },
    ...CONCAT_LAYOUTS.map((layout) => ({
      name: concatName(layout.name),
      prepare: async (dir: string, count: number) =>
        nftFile(dir, 'concat.nft', renderScript(count, 0, 'concat')),
    })),
  ];
}

export class Sender {
  private nextPort = 10_000;
  constructor(
    private readonly topo: Topology,
    private readonly batches: number,
    private readonly batchMs: number,
  ) {}

  async run(): Promise<{ us: number; flows: number }> {
    const first = this.nextPort;
    this.nextPort += this.batches + 1;
    if (this.nextPort > 60_000) throw new Error('out of destination ports for unique flows');
    const args = [
      senderScript,
      DESTINATION,
      String(first),
      String(this.batches),
      String(this.batchMs),
      '5000',
    ];
    const { stdout } = await timedIn(this.topo.pod, python, args, 300_000);
    const result = JSON.parse(stdout) as { flows: number; us: number[] };
    return { us: median(result.us), flows: result.flows };
  }
}

/** The masquerade decision must be what each layout claims, or its timing means nothing. */
async function checkDecisions(topo: Topology, count: number, layout: string): Promise<void> {
  const seen = await probeSource(topo, DESTINATION);
  if (seen.address !== NODE_IPV4)
    throw new Error(`${layout} ${count}: ${DESTINATION} not masqueraded`);
  if (count >= EXEMPT_FROM_SIZE) {
    const exempt = await probeSource(topo, EXEMPT_DESTINATION);
    if (exempt.address !== POD_IPV4)
      throw new Error(`${layout} ${count}: ${EXEMPT_DESTINATION} masqueraded`);
  }
}

export async function benchDataPath(
  sizes: readonly number[],
  batches: number,
  batchMs: number,
  only?: readonly string[],
  rounds = 1,
): Promise<DataPathResults> {
  return withScope(async (scope) => {
    const topo = await makeTopology(scope, { ipv6: false, echoLifetimeSeconds: 900 });
    const dir = await tempDir(scope);
    const sinkFile = join(dir, 'sink.nft');
    await writeFile(sinkFile, SINK_SCRIPT);
    await timedIn(topo.remote, 'nft', ['-f', sinkFile]);
    // Short-lived conntrack entries keep the node's table from filling over the run.
    await timedIn(topo.node, 'sysctl', [
      '-q',
      '-w',
      'net.netfilter.nf_conntrack_udp_timeout=5',
    ]).catch(() => undefined);
    const sender = new Sender(topo, batches, batchMs);
    const baselines: number[] = [];
    const rows: FlowRow[] = [];
    for (const layout of layouts().filter((l) => !only || only.includes(l.name))) {
      for (const count of sizes) {
        const [cmd, args] = await layout.prepare(dir, count);
        // Without the table, then with it, `rounds` times in turn (A, B, A, B): load that drifts
        // over the run cancels out in each pair.
        const pairs: Array<{ baseline: number; us: number; loadMs: number; flows: number }> = [];
        for (let round = 0; round < rounds; round++) {
          await timedIn(topo.node, 'nft', ['flush', 'ruleset']);
          const baseline = (await sender.run()).us;
          baselines.push(baseline);
          const loadMs = await timedInside(topo.node, cmd, args, 600_000);
          if (round === 0) await checkDecisions(topo, count, layout.name);
          const { us, flows } = await sender.run();
          pairs.push({ baseline, us, loadMs, flows });
        }
        const row: FlowRow = {
          layout: layout.name,
          cidrs: count,
          perFlowUs: median(pairs.map((p) => p.us)),
          netUs: median(pairs.map((p) => p.us - p.baseline)),
          loadMs: median(pairs.map((p) => p.loadMs)),
          flowsPerBatch: pairs[0]?.flows ?? 0,
        };
        rows.push(row);
        console.error(
          `bench: flow ${layout.name} ${count}: ${pairs.map((p) => `${p.us.toFixed(2)}/${p.baseline.toFixed(2)}`).join(' ')} µs/flow with/without (load ${Math.round(row.loadMs)} ms)`,
        );
      }
    }
    await timedIn(topo.node, 'nft', ['flush', 'ruleset']);
    const baselineUs = median(baselines);
    return { baselineUs, baselines, rows };
  });
}

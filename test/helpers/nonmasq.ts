// What the kernel holds and what a fresh flow sees, for the tests that follow data from elsewhere
// (the Kubernetes API, real or fake) into our nonmasq set.
import { inNetns } from '../../harness/netns.js';
import { probeSources, type Topology } from '../../harness/topology.js';

/** The kernel's `ip ipmasq nonmasq` set as prefixes; empty while the agent has not written it. */
export async function nonMasqSet(ns: string): Promise<string[]> {
  const listed = await inNetns(ns, 'nft', ['-j', 'list', 'set', 'ip', 'ipmasq', 'nonmasq']).catch(
    () => undefined,
  );
  if (!listed) return [];
  const parsed = JSON.parse(listed.stdout) as { nftables: Array<{ set?: { elem?: unknown[] } }> };
  const elems = parsed.nftables.find((item) => item.set)?.set?.elem ?? [];
  return elems.map((e) => {
    const prefix = (e as { prefix?: { addr: string; len: number } }).prefix;
    return prefix ? `${prefix.addr}/${prefix.len}` : JSON.stringify(e);
  });
}

/** Whether the set covers `address` (its elements merged or not). */
export function nonMasqCovers(ns: string, address: string): Promise<boolean> {
  return inNetns(ns, 'nft', ['get', 'element', 'ip', 'ipmasq', 'nonmasq', `{ ${address} }`]).then(
    () => true,
    () => false,
  );
}

/** The source the remote sees for a fresh UDP flow from the pod (conntrack flushed first). */
export async function seenFromPod(topo: Topology, dst: string): Promise<string> {
  await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
  const [answer] = await probeSources(topo, [dst], 'udp');
  return answer!.address;
}

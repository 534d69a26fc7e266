// Every translating shape of another table is seen (docs/observability.md, "Other NAT on the node";
// the red team's shapes, issue 51 item 2): verdict maps, anonymous and named, followed like jumps
// and gotos; a mark set in the same chain before the rule that matches it (not kube-proxy's shape,
// which returns the unmarked first); a comment holding a newline. For each, a real UDP packet from
// the pod to a destination our config leaves alone arrives translated to the node's address, the
// running agent warns about the chain, and --explain --live notes it for that flow.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { runAgentOnce, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import { makeTopology, NODE_IPV4, POD_IPV4, probeSource } from '../../harness/topology.js';

const PORT = 9413;
const EXEMPT = '10.9.0.1';

const MASQIT = `  chain masqit {
    masquerade
  }
`;
const hook = 'type nat hook postrouting priority srcnat + 10; policy accept;';

/** Each shape: a table of its own translating EXEMPT, and the chain the warning names. */
const SHAPES: ReadonlyArray<{ name: string; table: string; chain: string }> = [
  {
    name: 'an anonymous verdict map jumping to a masquerading chain',
    table: `table ip shape-a {
${MASQIT}  chain post {
    ${hook}
    ip daddr vmap { 10.9.0.0/16 : jump masqit }
  }
}
`,
    chain: 'post',
  },
  {
    name: 'a named verdict map with goto',
    table: `table ip shape-b {
  map where { type ipv4_addr : verdict; flags interval; elements = { 10.9.0.0/16 : goto masqit } }
${MASQIT}  chain post {
    ${hook}
    ip daddr vmap @where
  }
}
`,
    chain: 'post',
  },
  {
    name: 'a packet mark set in the chain before the masquerade that matches it',
    table: `table ip shape-c {
  chain post {
    ${hook}
    meta mark set 0x4000
    meta mark 0x4000 masquerade
  }
}
`,
    chain: 'post',
  },
  {
    name: 'a conntrack mark set likewise',
    table: `table ip shape-d {
  chain post {
    ${hook}
    ct mark set 0x4000
    ct mark 0x4000 masquerade
  }
}
`,
    chain: 'post',
  },
  {
    name: 'a comment holding a newline',
    table: `table ip shape-e {
  chain post {
    ${hook}
    ip daddr 10.9.0.0/16 masquerade comment "pods
meta mark 0x1"
  }
}
`,
    chain: 'post',
  },
];

if (requireRoot(t)) {
  const topo = await makeTopology(t, { ipv6: false });
  const dir = tempDir(t, 'other-nat-shapes');
  const configFile = join(dir, 'ip-masq-agent');
  writeFileSync(configFile, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n');
  const agent = startAgent(t, topo.node, ['--config', configFile, '--listen', `127.0.0.1:${PORT}`]);
  await waitFor('the first write', () =>
    agent.logs.some((l) => l.generation === 1) ? true : undefined,
  );
  t.equal((await probeSource(topo, EXEMPT)).address, POD_IPV4, 'no other table: left alone');

  for (const shape of SHAPES) {
    t.test(shape.name, async (t) => {
      const table = `ip ${/^table ip (\S+)/.exec(shape.table)![1]}`;
      await inNetns(topo.node, 'nft', ['-f', '-'], { input: shape.table });
      t.teardown(async () => {
        await inNetns(topo.node, 'nft', ['delete', 'table', ...table.split(' ')]);
        await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
      });
      t.equal(
        (await probeSource(topo, EXEMPT)).address,
        NODE_IPV4,
        'the kernel translates a flow our config leaves alone',
      );
      const warning = await waitFor(
        'the warning',
        () =>
          agent.logs.find((l) => l.level === 40 && l.table === table && 'translatingRules' in l),
        30_000,
      );
      t.match(warning, { chain: shape.chain, position: 'after' }, 'the running agent warns');
      const answer = await runAgentOnce(topo.node, [
        '--config',
        configFile,
        '--explain',
        EXEMPT,
        '--live',
        '--from',
        POD_IPV4,
        '--output',
        'json',
      ]);
      t.equal(answer.code, 0, answer.stderr);
      const live = JSON.parse(answer.stdout).live.answers[0];
      t.equal(live.masqueraded, false, 'our table leaves it alone');
      const noted = (live.otherNat as Array<{ table: string; verdict: string }>).find(
        (note) => note.table === table,
      );
      t.ok(noted, '--explain --live notes the chain for this flow');
      t.match(noted?.verdict, /^(translates|may translate)$/);
    });
  }
}

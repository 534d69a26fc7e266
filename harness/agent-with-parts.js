#!/usr/bin/env node
// The agent as bin/ipmasq-agent.js starts it, with some of its parts (src/agent.ts, AgentParts)
// given by a test, as a fake kernel would be: nothing in src/ reads a switch for a test.
//
//   node harness/agent-with-parts.js PARTS-JSON AGENT-ARGS...
//
// PARTS-JSON (harness/agent.ts, agentWithParts) is an object of:
//   fault: "config"          the config worker's fast path leaves out the first entry an edit adds
//   fault: "element-write"   the first element-only write that adds elements leaves one out
//   kubernetesTimings        shorter stall detection, backoff and wait between Events
//                            (src/kubernetes/index.ts, KubernetesTimings)
// The faults are put in on purpose for the tests of the audits that must catch them (docs/writes.md,
// "The everyday edit").
const { installSignalHandlers } = await import('../dist/signals.js');
installSignalHandlers();
const { conserveMemory } = await import('../dist/memory.js');
conserveMemory();
const { main } = await import('../dist/cli.js');
const { nftKernel } = await import('../dist/kernel/kernel.js');

const [given, ...args] = process.argv.slice(2);
const { fault, kubernetesTimings } = JSON.parse(given ?? '{}');

/** `kernel`, but the first edit that adds elements to a set writes all of them but the first. */
function droppingFirstAdded(kernel) {
  let left = true;
  return {
    ...kernel,
    edit(edit, options) {
      if (!left) return kernel.edit(edit, options);
      const tables = edit.tables.map((table) => ({
        ...table,
        sets: table.sets.map((set) => {
          if (!left || set.added.length === 0) return set;
          left = false;
          return { ...set, added: Object.freeze(set.added.slice(1)) };
        }),
      }));
      return kernel.edit({ ...edit, tables }, options);
    },
  };
}

if (fault !== undefined && fault !== 'config' && fault !== 'element-write') {
  console.error(`agent-with-parts: unknown fault ${JSON.stringify(fault)}`);
  process.exit(2);
}
const parts = {
  ...(fault === 'config' ? { loadFaults: { dropFirstAddition: true } } : {}),
  ...(fault === 'element-write' ? { kernel: droppingFirstAdded(nftKernel) } : {}),
  ...(kubernetesTimings ? { kubernetesTimings } : {}),
};

main(args, parts).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    console.error(err);
    process.exit(1);
  },
);

#!/usr/bin/env node
// Signal handlers come first, before the agent's modules load (~100 ms): without them a SIGTERM or
// SIGHUP in that time kills the process (src/signals.ts says what they do until the agent starts).
const { installSignalHandlers } = await import('../dist/signals.js');
installSignalHandlers();
// V8 settings that keep the agent's memory down, before the modules load (src/memory.ts).
const { conserveMemory } = await import('../dist/memory.js');
conserveMemory();
const { main } = await import('../dist/cli.js');

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    console.error(err);
    process.exit(1);
  },
);

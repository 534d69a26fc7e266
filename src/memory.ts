// Two V8 settings that keep an idle agent's RSS down (docs/design.md, "Memory"), set first thing by
// bin/ipmasq-agent.js before the agent's modules load; V8 reads both flags whenever it acts on them.
//
// - The young generation stays at its first 1 MiB per semi-space: V8 doubles it while allocation is
//   brisk (loading modules) and keeps its pages, ~5 MiB of an idle agent's RSS.
// - The optimizing compiler (TurboFan) is off until work needs it: compiling hot start-up code costs
//   ~6 MiB (its code pages in the node binary and the optimized code) for nothing an idle agent
//   does — interpreted and baseline code answer a probe in well under a millisecond and parse a few
//   thousand CIDRs in ~10 ms. needOptimizer() turns it on, with the young generation's growth, for
//   the rest of the process: a config big enough for the worker thread, a large conntrack flush,
//   every one-shot command.
import { setFlagsFromString } from 'node:v8';

let optimizerOn = true;

export function conserveMemory(): void {
  setFlagsFromString('--semi-space-growth-factor=1');
  setFlagsFromString('--no-turbofan');
  optimizerOn = false;
}

/** Turns the optimizing compiler back on (if conserveMemory turned it off). */
export function needOptimizer(): void {
  if (optimizerOn) return;
  setFlagsFromString('--turbofan');
  setFlagsFromString('--semi-space-growth-factor=2');
  optimizerOn = true;
}

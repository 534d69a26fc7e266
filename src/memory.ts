// Two V8 settings that keep an idle agent's RSS down (docs/design.md, "Memory"), set first thing by
// bin/ipmasq-agent.js before any module loads; V8 reads both flags whenever it would act on them.
//
// - The young generation stays at its first 1 MiB per semi-space: V8 doubles it while allocation is
//   brisk (loading modules, a large config's parse) and keeps its pages, ~7 MiB of an idle agent's
//   RSS and ~30 MiB after 100 000 CIDRs; a large load pays a few more scavenges instead.
// - The optimizing compiler (TurboFan) is off until work needs it: compiling hot start-up code costs
//   ~6 MiB (its code pages in the node binary and the optimized code) for nothing an idle agent
//   does — interpreted and baseline code answer a probe in well under a millisecond and parse a few
//   thousand CIDRs in ~10 ms. needOptimizer() turns it on for the rest of the process: a config big
//   enough for the worker thread, a large conntrack flush, every one-shot command.
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

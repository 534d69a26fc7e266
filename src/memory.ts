// Two V8 settings that keep an idle agent's RSS down (docs/design.md, "Memory"), set first thing by
// bin/ipmasq-agent.js before the agent's modules load (V8 reads both flags whenever it acts on them),
// and a full collection a worker asks for once its work is done.
//
// - The young generation stays at its first size: V8 grows it while allocation is brisk (loading
//   modules) and keeps its pages afterwards.
// - The optimizing compiler (TurboFan) is off until work needs it: compiling hot start-up code costs
//   memory for nothing an idle agent does, which interpreted and baseline code do fast enough.
//   needOptimizer() turns it on, with the young generation's growth, for the rest of the process:
//   a config big enough for the worker thread, a large conntrack flush, every one-shot command.
// What each saves is in docs/design.md, "Memory".
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

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

let gc: (() => void) | undefined;

/**
 * A full garbage collection of the calling thread's isolate: a worker calls it once its work is
 * posted, so that a kept worker holds its live data rather than the garbage of a large parse
 * (docs/design.md, "Memory"). V8 exposes `gc` to contexts made after the flag is set.
 */
export function collectGarbage(): void {
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
}

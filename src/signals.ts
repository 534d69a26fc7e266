// One listener per signal for the whole life of the process, installed before anything heavy loads
// (bin/ipmasq-agent.js imports this module first). Listeners are never removed: libuv delivers a
// signal to JavaScript asynchronously, and one that arrives while modules load would be dropped if
// its listener were replaced before the loop dispatched it. What a signal does is swapped instead.
export type SignalName = 'SIGTERM' | 'SIGINT' | 'SIGHUP';
type Handler = (signal: SignalName) => void;

/** Until the agent takes over: stop cleanly (nothing has been written yet); absorb SIGHUP. */
const startup: Handler = (signal) => {
  if (signal !== 'SIGHUP') process.exit(0);
};

let current: Handler = startup;
let installed = false;

export function installSignalHandlers(): void {
  if (installed) return;
  installed = true;
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.on(signal, () => current(signal));
  }
}

/** From now on, signals go to `handler`. */
export function handleSignals(handler: Handler): void {
  installSignalHandlers();
  current = handler;
}

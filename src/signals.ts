// One listener per signal for the whole life of the process, installed before anything heavy loads
// (bin/ipmasq-agent.js imports this module first). Listeners are never removed: libuv delivers a
// signal to JavaScript asynchronously, and one that arrives while modules load would be dropped if
// its listener were replaced before the loop dispatched it. What a signal does is swapped instead.
import { closeSync, writeSync } from 'node:fs';
import inspector from 'node:inspector';

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
  refuseDebugger();
  tellLauncher();
}

/**
 * Under the image's launcher (native/launch.c), which holds every signal until the agent's handlers
 * are in place: says they are, with a byte on the pipe it names, and closes it.
 */
function tellLauncher(): void {
  const fd = Number(process.env.IPMASQ_READY_FD);
  delete process.env.IPMASQ_READY_FD;
  if (!Number.isInteger(fd) || fd < 3) return;
  try {
    writeSync(fd, '1');
    closeSync(fd);
  } catch {
    // not a pipe of a launcher's: nothing to tell
  }
}

/**
 * SIGUSR1 makes Node open its inspector on 127.0.0.1:9229, where any process on the node's loopback
 * (a hostNetwork pod) could run code in an agent that holds NET_ADMIN (docs/writes.md, "When it
 * writes": its signals). A listener of our own takes the signal from the inspector for the rest of
 * the process's life; one that came in before it, while Node started, may have opened the inspector
 * already or may open it later, so it is closed here, once more when the loop has run, and whenever
 * it is found open.
 */
function refuseDebugger(): void {
  process.on('SIGUSR1', () => {});
  if (asked(process.execArgv) || asked((process.env.NODE_OPTIONS ?? '').split(/\s+/))) return;
  closeInspector();
  setImmediate(closeInspector);
  // Node's own handler only wakes a watchdog thread, which then asks this thread to open the
  // inspector; on a busy machine that thread may run well after the two closes above (seen with the
  // CPU saturated). So the inspector is looked for every 20 ms through the start-up's first
  // seconds, and every second after that for the life of the process.
  const early = setInterval(closeInspector, 20).unref();
  setTimeout(() => {
    clearInterval(early);
    setInterval(closeInspector, 1_000).unref();
  }, 10_000).unref();
}

/** --inspect, --inspect-brk, --inspect-wait: the operator asked for a debugger. */
const asked = (args: readonly string[]) =>
  args.some((arg) => /^--inspect(-brk|-wait)?(=|$)/.test(arg));

function closeInspector(): void {
  if (inspector.url() !== undefined) inspector.close();
}

/** From now on, signals go to `handler`. */
export function handleSignals(handler: Handler): void {
  installSignalHandlers();
  current = handler;
}

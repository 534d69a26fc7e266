// The one way the agent starts a worker thread (the config loader's, the changed ranges'): with the
// optimizing compiler on, since only work large enough to need it goes to a worker (src/memory.ts),
// and with the process's Node flags but those that only make sense for the main script. A worker's
// start sets V8's flags back to their defaults: its caller holds the young generation's growth while
// it works (holdYoungGrowth), whose end sets the agent's again.
import { Worker } from 'node:worker_threads';
import { needOptimizer } from './memory.js';

export function startWorker(module: URL, workerData?: unknown): Worker {
  needOptimizer();
  // --input-type (with -e) would fail the worker: its script is a file.
  const execArgv = process.execArgv.filter((arg) => !arg.startsWith('--input-type'));
  return new Worker(module, { execArgv, ...(workerData === undefined ? {} : { workerData }) });
}

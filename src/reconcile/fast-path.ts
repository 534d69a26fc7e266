// The audits of the agent's fast paths (docs/writes.md, "The everyday edit"): a config read from
// the last load and an element-only write are each checked by the whole path within a second; a
// disagreement is an error, logged and counted here, and the whole path's answer is then applied by
// a sync that reads the config whole and the kernel back.
import type { Logger } from 'pino';
import type { AgentMetrics, FastPath } from './metrics.js';

/** The reason of the sync that applies the whole path's answer after a mismatch. */
export const FAST_PATH_MISMATCH = 'fast path mismatch';

/** The reason of the sync that audits an element-only write by reading our tables back. */
export const ELEMENT_WRITE_AUDIT = 'element-write audit';

/**
 * How long after an element-only write its audit comes when no other write follows, and at most
 * after the first write of a burst: within the contract's second, the read itself included (the
 * changed sets over netlink, compared on a pool thread: ~80 ms at 100 000 elements), and soon, so
 * that the read is over by the next edit (a write during it makes the audit read again).
 */
export const ELEMENT_AUDIT_DELAY_MS = 50;
export const ELEMENT_AUDIT_WITHIN_MS = 750;

/** What each fast path is called in its mismatch's log line. */
const FAST_PATH_NAMES: Record<FastPath, string> = {
  config: 'config read from the last load',
  'element-write': 'element-only write',
  'commit-notifications': "nftables' notifications that our tables were left alone",
  'config-listing': "config directory's listing kept while its metadata stayed",
};

/** Logs and counts one mismatch of `path`; `details` are the log line's fields. */
export function reportMismatch(
  logger: Logger,
  metrics: AgentMetrics,
  path: FastPath,
  details: Record<string, unknown>,
): void {
  metrics.incFastPathMismatch(path);
  logger.error(
    { path, ...details },
    `the ${FAST_PATH_NAMES[path]} disagreed with the whole path; applying the whole path's answer`,
  );
}

// What the agent reports (docs/observability.md, "HTTP"): one pure function of the facts the
// reconciler records. The server only reads the result; readiness and its reason are never stored,
// always derived.
import type { CidrSets } from '../config/types.js';

/** What the reconciler knows after its last sync. */
export interface SyncFacts {
  /** The last good config's hash, once one was read. */
  readonly configHash: string | null;
  /** Why the last config read was invalid; null when it was valid (or none was read yet). */
  readonly configError: string | null;
  /**
   * What the config waits for from the API server (docs/kubernetes.md, "Kubernetes API (opt-in)");
   * null: nothing.
   */
  readonly waiting: string | null;
  /**
   * The kernel: not written or confirmed yet, holding the last good config, written but not yet
   * confirmed (other tools' commits came around every look), or the last write failed.
   */
  readonly kernel: 'unknown' | 'in-sync' | 'unverified' | 'failed';
  /** Why the last kernel write failed, while kernel is 'failed'. */
  readonly kernelError: string | null;
  /**
   * The last sync's error (a kernel failure, or the loader itself failing); null after a good sync.
   */
  readonly lastError: string | null;
  /** Another agent wrote our table lately (other-agent.ts): we hold back and are not ready. */
  readonly otherAgent: boolean;
  readonly generation: number;
  readonly lastSyncTime: Date | null;
  /** Entries of the kernel's non-masquerade sets, as last confirmed. */
  readonly counts: { readonly [F in keyof CidrSets]: number };
}

export const initialFacts: SyncFacts = {
  configHash: null,
  configError: null,
  waiting: null,
  kernel: 'unknown',
  kernelError: null,
  lastError: null,
  otherAgent: false,
  generation: 0,
  lastSyncTime: null,
  counts: { ipv4: 0, ipv6: 0 },
};

export interface AgentStatus {
  /** The sync loop is alive. */
  alive: boolean;
  /** The last kernel write, if one was needed, succeeded. */
  lastWriteOk: boolean;
  /** 0 before the first write. */
  generation: number;
  configHash: string | null;
  lastSyncTime: Date | null;
  lastError: string | null;
  configError: string | null;
  /** What the config waits for from the API server; null when nothing. */
  waiting: string | null;
  /** Entries in the kernel's non-masquerade sets. */
  nonMasqueradeCIDRs: { ipv4: number; ipv6: number };
  /** The kernel holds the ruleset of the current, valid config. */
  ready: boolean;
  notReadyReason: string | null;
}

/** Why the agent is not ready, most fundamental first; null when it is. */
function notReadyReason(facts: SyncFacts): string | null {
  if (facts.configHash === null) {
    if (facts.waiting !== null) return `nothing applied yet: ${facts.waiting}`;
    return facts.configError === null
      ? 'no sync yet'
      : `config invalid, nothing applied: ${facts.configError}`;
  }
  if (facts.kernel === 'failed') return `kernel write failed: ${facts.kernelError}`;
  if (facts.kernel === 'unknown') return 'no sync yet';
  if (facts.kernel === 'unverified') {
    return 'written, not yet confirmed: other nftables commits came around each look at our tables';
  }
  if (facts.configError !== null) {
    return `config invalid, the kernel keeps the last good ruleset: ${facts.configError}`;
  }
  if (facts.waiting !== null) {
    return `the kernel keeps the last good ruleset while the config waits: ${facts.waiting}`;
  }
  if (facts.otherAgent) {
    return 'another ipmasq-agent is writing our table with another config; holding back';
  }
  return null;
}

export function agentStatus(facts: SyncFacts, alive: boolean): AgentStatus {
  const reason = notReadyReason(facts);
  return {
    alive,
    lastWriteOk: facts.kernel !== 'failed',
    generation: facts.generation,
    configHash: facts.configHash,
    lastSyncTime: facts.lastSyncTime,
    lastError: facts.lastError,
    configError: facts.configError,
    waiting: facts.waiting,
    nonMasqueradeCIDRs: { ...facts.counts },
    ready: reason === null,
    notReadyReason: reason,
  };
}

// The --conntrack-flush modes (docs/writes.md, "Existing flows"): a leaf, so that reading the flags
// loads nothing of the flush itself.
export const conntrackFlushModes = ['udp', 'all', 'none'] as const;
/** `udp`: UDP and UDP-Lite entries only; `all`: every protocol (resets TCP); `none`: keep them. */
export type ConntrackFlushMode = (typeof conntrackFlushModes)[number];

// Events on the agent's Node (docs/kubernetes.md, "Kubernetes API (opt-in)"), what `kubectl
// describe node` shows: one Event per distinct cause, repeats counted on it, at most one API write
// per reason per minute. emit() never waits: the writes run on their own timers, and a failed one
// is only logged and counted.
import type { Logger } from 'pino';
import { errorText } from '../errors.js';
import { escapeUnprintable } from '../cidr/index.js';
import { ApiError, type ApiClient } from './client.js';

export const eventReasons = {
  ConfigInvalid: 'Warning',
  ConfigRecovered: 'Normal',
  ConflictingWriter: 'Warning',
  KernelWriteFailed: 'Warning',
  LegacyChainPresent: 'Warning',
  OtherNATPresent: 'Warning',
} as const;
export type EventReason = keyof typeof eventReasons;

/** Where the reconciler reports what an operator should see on the Node. */
export type NodeEvents = (reason: EventReason, message: string) => void;

export const COMPONENT = 'ipmasq-agent';
/** kubelet's namespace for Node events; `kubectl describe node` looks in every namespace. */
export const EVENTS_NAMESPACE = 'default';
const NAMESPACE = EVENTS_NAMESPACE;
const MESSAGE_MAX = 1024;
/** Distinct messages remembered per reason: the oldest are forgotten first. */
const KEPT_PER_REASON = 32;

interface Recorded {
  name: string | undefined;
  count: number;
  first: string;
}

interface ReasonState {
  lastWrite: number;
  timer: NodeJS.Timeout | undefined;
  /** The message whose count is not written yet. */
  dirty: string | undefined;
  readonly events: Map<string, Recorded>;
}

export interface EventRecorderOptions {
  readonly client: ApiClient;
  readonly nodeName: string;
  readonly logger: Logger;
  readonly onError: (err: unknown) => void;
  readonly intervalMs?: number;
  readonly now?: () => number;
}

export class EventRecorder {
  private readonly reasons = new Map<EventReason, ReasonState>();
  private readonly intervalMs: number;
  private readonly now: () => number;
  private lastLogged: string | undefined;
  private stopped = false;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly options: EventRecorderOptions) {
    this.intervalMs = options.intervalMs ?? 60_000;
    this.now = options.now ?? Date.now;
  }

  readonly emit: NodeEvents = (reason, text) => {
    if (this.stopped) return;
    const message = text.length > MESSAGE_MAX ? `${text.slice(0, MESSAGE_MAX - 1)}…` : text;
    let state = this.reasons.get(reason);
    if (!state) {
      state = { lastWrite: -Infinity, timer: undefined, dirty: undefined, events: new Map() };
      this.reasons.set(reason, state);
    }
    let recorded = state.events.get(message);
    if (!recorded) {
      recorded = { name: undefined, count: 0, first: new Date(this.now()).toISOString() };
      state.events.set(message, recorded);
      if (state.events.size > KEPT_PER_REASON) {
        const oldest = state.events.keys().next().value as string;
        state.events.delete(oldest);
      }
    }
    recorded.count += 1;
    state.dirty = message;
    this.schedule(reason, state);
  };

  /** Waits for the writes under way (tests, shutdown); later ones are dropped. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const state of this.reasons.values()) clearTimeout(state.timer);
    await Promise.allSettled([...this.inFlight]);
  }

  private schedule(reason: EventReason, state: ReasonState): void {
    if (state.timer !== undefined) return;
    const wait = Math.max(0, state.lastWrite + this.intervalMs - this.now());
    state.timer = setTimeout(() => {
      state.timer = undefined;
      const write = this.flush(reason, state);
      this.inFlight.add(write);
      void write.finally(() => this.inFlight.delete(write));
    }, wait);
    state.timer.unref();
  }

  private async flush(reason: EventReason, state: ReasonState): Promise<void> {
    const message = state.dirty;
    if (message === undefined || this.stopped) return;
    state.dirty = undefined;
    state.lastWrite = this.now();
    const recorded = state.events.get(message);
    if (!recorded) return;
    const { client, nodeName } = this.options;
    const now = new Date(this.now()).toISOString();
    try {
      if (recorded.name !== undefined) {
        try {
          await client.json(
            'PATCH',
            `/api/v1/namespaces/${NAMESPACE}/events/${encodeURIComponent(recorded.name)}`,
            {
              body: { count: recorded.count, lastTimestamp: now },
              contentType: 'application/merge-patch+json',
            },
          );
          return;
        } catch (err) {
          // Events expire (an hour by default): the count goes on in a new one.
          if (!(err instanceof ApiError && err.status === 404)) throw err;
        }
      }
      const name = `${nodeName}.${(this.now() * 1000 + Math.floor(Math.random() * 1000)).toString(16)}`;
      await client.json('POST', `/api/v1/namespaces/${NAMESPACE}/events`, {
        body: {
          apiVersion: 'v1',
          kind: 'Event',
          metadata: { name, namespace: NAMESPACE },
          // kubectl describe node finds a Node's Events by its name as uid, as kubelet writes them.
          involvedObject: { apiVersion: 'v1', kind: 'Node', name: nodeName, uid: nodeName },
          reason,
          message,
          type: eventReasons[reason],
          source: { component: COMPONENT, host: nodeName },
          reportingComponent: COMPONENT,
          reportingInstance: nodeName,
          firstTimestamp: recorded.first,
          lastTimestamp: now,
          count: recorded.count,
        },
      });
      recorded.name = name;
    } catch (err) {
      this.options.onError(err);
      const text = `could not post the ${reason} Event on Node ${nodeName}: ${errorText(err)}`;
      if (text !== this.lastLogged) {
        this.lastLogged = text;
        this.options.logger.warn(escapeUnprintable(text));
      }
      // Written again with the next occurrence of the reason (its count kept meanwhile).
      state.dirty ??= message;
    }
  }
}

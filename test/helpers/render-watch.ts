// The largest element list the renderer made in one piece while a test watched (src/nftables/render.ts,
// RENDERED_IN_ONE_PIECE): the test's own count, from the renderer's diagnostics channel.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { RENDERED_IN_ONE_PIECE } from '../../src/nftables/render.js';

export interface RenderWatch {
  /** The most elements rendered in one piece since the start or the last reset. */
  most: number;
}

/** Watches the renderer until the test ends. */
export function watchRenders(t: { teardown(fn: () => void): void }): RenderWatch {
  const watch: RenderWatch = { most: 0 };
  const listener = (message: unknown) => {
    watch.most = Math.max(watch.most, (message as { elements: number }).elements);
  };
  subscribe(RENDERED_IN_ONE_PIECE, listener);
  t.teardown(() => unsubscribe(RENDERED_IN_ONE_PIECE, listener));
  return watch;
}

// Go's time.ParseDuration grammar ("300ms", "1.5h", "2m30s"), as upstream's resyncInterval uses it.

const NANOS_PER_UNIT: Readonly<Record<string, number>> = {
  ns: 1,
  us: 1e3,
  µs: 1e3, // U+00B5 micro sign
  μs: 1e3, // U+03BC Greek mu
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};
const MAX_NANOS = 2 ** 63 - 1;
const WHOLE = /^[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$/;
const COMPONENT = /([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)/g;

/** Milliseconds (may be fractional, may be <= 0), or the reason the text is not a Go duration. */
export function parseGoDuration(text: string): number | string {
  if (text === '') return 'is empty (write a duration such as "60s")';
  if (/^[-+]?[0-9.]+$/.test(text)) {
    return `has no unit (write e.g. "${text}s"; units are ns, us, ms, s, m, h)`;
  }
  if (!WHOLE.test(text)) {
    return 'is not a Go duration (e.g. "60s", "1m30s", "500ms"; units are ns, us, ms, s, m, h)';
  }
  let nanos = 0;
  for (const match of text.matchAll(COMPONENT)) {
    nanos += Number(match[1]) * (NANOS_PER_UNIT[match[2] as string] as number);
  }
  if (nanos > MAX_NANOS) return 'is too large for a Go duration (about 292 years at most)';
  return (text.startsWith('-') ? -nanos : nanos) / 1e6;
}

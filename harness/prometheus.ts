// The tests' one reader of the Prometheus text exposition format: strict enough that a malformed
// line fails the test that scraped it. (promtool checks the real exposition too, in server tests.)

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
export interface MetricFamily {
  type: string;
  samples: Sample[];
}

// Sample names each type may use besides the family name itself.
const suffixes: Record<string, string[]> = {
  counter: [''],
  gauge: [''],
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['', '_sum', '_count'],
};

// Prometheus reads values with Go's ParseFloat, which takes NaN and Inf in any case.
const special = new Map([
  ['nan', NaN],
  ['+inf', Infinity],
  ['inf', Infinity],
  ['-inf', -Infinity],
]);

function parseLabels(text: string | undefined, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  if (!text) return labels;
  const labelPattern = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/gy;
  let consumed = 0;
  for (const match of text.matchAll(labelPattern)) {
    labels[match[1]!] = match[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    consumed += match[0].length;
  }
  if (consumed !== text.length) throw new Error(`bad labels: ${line}`);
  return labels;
}

export function parseExposition(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  let current: { name: string; family: MetricFamily } | undefined;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ')) continue;
    const typeLine = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary)$/.exec(
      line,
    );
    if (typeLine) {
      const name = typeLine[1]!;
      if (families.has(name)) throw new Error(`family ${name} declared twice`);
      current = { name, family: { type: typeLine[2]!, samples: [] } };
      families.set(name, current.family);
      continue;
    }
    const sampleLine = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/.exec(line);
    if (!sampleLine) throw new Error(`unparsable line: ${line}`);
    const [, name, labelText, valueText] = sampleLine;
    if (!current) throw new Error(`sample before any TYPE: ${line}`);
    const allowed = suffixes[current.family.type]!.map((s) => current!.name + s);
    if (!allowed.includes(name!)) throw new Error(`sample ${name} outside family ${current.name}`);
    const value = special.get(valueText!.toLowerCase()) ?? Number(valueText);
    if (Number.isNaN(value) && valueText!.toLowerCase() !== 'nan') {
      throw new Error(`bad value: ${line}`);
    }
    current.family.samples.push({ name: name!, labels: parseLabels(labelText, line), value });
  }
  return families;
}

/**
 * The value of one series, written as in the exposition (`name` or `name{label="v",…}`), or
 * undefined when it is absent. Throws when the exposition itself is malformed.
 */
export function metricValue(text: string, series: string): number | undefined {
  const spec = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$/.exec(series);
  if (!spec) throw new Error(`not a series: ${series}`);
  const [, name, labelText] = spec;
  const wanted = parseLabels(labelText, series);
  const keys = Object.keys(wanted);
  for (const family of parseExposition(text).values()) {
    const sample = family.samples.find(
      (s) =>
        s.name === name &&
        Object.keys(s.labels).length === keys.length &&
        keys.every((key) => s.labels[key] === wanted[key]),
    );
    if (sample) return sample.value;
  }
  return undefined;
}

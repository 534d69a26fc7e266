// Command-line flags (README, "Flags"), parsed by hand because existing manifests use Go's flag syntax:
// `-flag=value` and `-flag value` with one dash, `--flag` for booleans, and klog flags we must tolerate.
// One declarative table (FLAGS) gives the usage text, the defaults and the parsing; options.ts turns
// the result into each stage's options.
import { AUTO_LAYOUT_CROSSOVER, setLayouts } from '../compile.js';
import { parseInterfaceName, parseLabel, parseNodeName, ValueError } from '../config/egress.js';
import { CidrError, parseAddress, parseCidr } from '../cidr/index.js';
import { parseGoDuration } from '../config/duration.js';
import { DEFAULT_CONFIG_PATH } from '../config/source.js';
import {
  checkMasqChain,
  checkName,
  FlagError,
  oneOf,
  parseListen,
  parsePortRanges,
} from './flag-values.js';
import { conntrackFlushModes } from '../reconcile/flush-modes.js';
import { DEFAULT_WIDEST_NODE_POD_CIDR } from '../kubernetes/pod-cidrs.js';
import { logLevels, outputs, usesApi, type AgentOptions, type Mode } from '../options.js';

export type { AgentOptions } from '../options.js';

export type ParseResult =
  | { ok: true; options: AgentOptions; warnings: string[] }
  | { ok: false; exitCode: 2; message: string };

/** -h / --help: Go's flag package prints usage for it; our result type has only exit code 2. */
class HelpRequested extends FlagError {}

// Go's strconv.ParseBool spellings.
const boolSpellings = new Map<string, boolean>([
  ...['1', 't', 'T', 'TRUE', 'true', 'True'].map((s) => [s, true] as const),
  ...['0', 'f', 'F', 'FALSE', 'false', 'False'].map((s) => [s, false] as const),
]);

type Options = { -readonly [K in keyof AgentOptions]: AgentOptions[K] };
type Draft = Options & { modes: Mode[] };

/** One command-line flag: its usage entry, the option it sets with its default, and its parser. */
interface Flag {
  readonly name: string;
  /** `value` takes an argument; `bool` is given bare or as `=BOOL`. */
  readonly kind: 'value' | 'bool';
  readonly section: 'flags' | 'modes';
  /** The argument's placeholder in the usage, e.g. PATH. */
  readonly arg?: string;
  readonly help: string;
  /** Appended to the help as "(default …)": the initial value's text unless said otherwise. */
  readonly shownDefault?: string;
  /** The option the flag sets and its value when the flag is not given. */
  readonly option?: { readonly key: keyof Options; readonly initial: Options[keyof Options] };
  /** --explain and --check take any number of values after their first. */
  readonly more?: boolean;
  /** The environment variable whose value stands for the flag when it is not given. */
  readonly env?: string;
  readonly apply: (value: string | boolean, draft: Draft) => void;
  /**
   * What the flag goes with, judged once every flag is read, when it was given: the problem in
   * words, or undefined where it belongs.
   */
  readonly goesWith?: GoesWith;
}

type GoesWith = (draft: Draft, given: ReadonlySet<string>) => string | undefined;

/** The flag, with what it goes with. */
const goes = (flag: Flag, goesWith: GoesWith): Flag => ({ ...flag, goesWith });

/** The flag goes with --explain and --from. */
const withFrom =
  (name: string): GoesWith =>
  (draft, given) =>
    draft.modes.includes('explain') && given.has('from')
      ? undefined
      : `--${name} goes with --explain and --from (the pod's address)`;

/** The flag goes with one of these modes (`words`: them as the message names them). */
const withModes =
  (name: string, modes: readonly Mode[], words: string): GoesWith =>
  (draft) =>
    draft.modes.some((m) => modes.includes(m)) ? undefined : `--${name} goes with ${words}`;

/** `LEN` or `LEN,LEN6`: prefix lengths, IPv4 0–32 and IPv6 0–128 (IPv6 48 when not given). */
function parseWidest(text: string): Options['widestNodePodCIDR'] {
  const parts = text.split(',');
  const len = (part: string | undefined, max: number) => {
    const n = Number((part ?? '').replace(/^\//, ''));
    if (part === undefined || part.trim() === '' || !Number.isInteger(n) || n < 0 || n > max)
      throw new FlagError(
        `--widest-node-pod-cidr: ${JSON.stringify(text)} is not LEN or LEN,LEN6 (IPv4 0-32, IPv6 0-128)`,
      );
    return n;
  };
  if (parts.length > 2) len(undefined, 0);
  return {
    ipv4: len(parts[0], 32),
    ipv6: parts.length === 2 ? len(parts[1], 128) : DEFAULT_WIDEST_NODE_POD_CIDR.ipv6,
  };
}

/** A flag whose value is parsed into option `key`. */
function value<K extends keyof Options>(
  name: string,
  key: K,
  initial: Options[K],
  parse: (text: string, draft: Draft) => Options[K],
  usage: {
    arg: string;
    help: string;
    shownDefault?: string;
    section?: Flag['section'];
    env?: string;
  },
): Flag {
  return {
    name,
    kind: 'value',
    section: usage.section ?? 'flags',
    arg: usage.arg,
    help: usage.help,
    ...(usage.env === undefined ? {} : { env: usage.env }),
    // A non-empty string default is shown as it is; other defaults say how they are shown.
    ...(usage.shownDefault !== undefined
      ? { shownDefault: usage.shownDefault }
      : typeof initial === 'string' && initial !== ''
        ? { shownDefault: initial }
        : {}),
    option: { key, initial },
    apply: (text, draft) => {
      (draft as Options)[key] = parse(String(text), draft);
    },
  };
}

/** A boolean flag setting option `key`. */
function bool<
  K extends { [P in keyof Options]: Options[P] extends boolean ? P : never }[keyof Options],
>(name: string, key: K, initial: boolean, help: string): Flag {
  return {
    name,
    kind: 'bool',
    section: 'flags',
    help,
    shownDefault: String(initial),
    option: { key, initial },
    apply: (on, draft) => {
      (draft as Record<K, boolean>)[key] = on === true;
    },
  };
}

function setMode(mode: Mode, on: boolean, draft: Draft): void {
  if (on && !draft.modes.includes(mode)) draft.modes.push(mode);
  if (!on) draft.modes = draft.modes.filter((m) => m !== mode);
}

/** A mode given as a boolean (--once). */
function mode(name: Mode, help: string): Flag {
  return {
    name,
    kind: 'bool',
    section: 'modes',
    help,
    apply: (on, d) => setMode(name, on === true, d),
  };
}

/** A mode whose values are collected into option `key` (--explain ADDR…, --check PATH…). */
function listMode(
  name: 'explain' | 'check',
  key: 'explain' | 'check',
  arg: string,
  help: string,
): Flag {
  return {
    name,
    kind: 'value',
    section: 'modes',
    arg,
    help,
    more: true,
    option: { key, initial: Object.freeze([]) },
    apply: (text, draft) => {
      setMode(name, true, draft);
      draft[key] = [...draft[key], String(text)];
    },
  };
}

/** deploy/kubernetes/configmap.yaml's ConfigMap, which --check looks for in a manifest. */
export const DEFAULT_CONFIGMAP = 'kube-system/ip-masq-agent';

/** NAMESPACE/NAME or NAME (any namespace), as Kubernetes spells object names. */
function parseConfigMapName(text: string, draft: Draft): readonly string[] {
  const problem =
    /^(?:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\/)?[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$/.test(text)
      ? undefined
      : 'not a ConfigMap name (NAME or NAMESPACE/NAME)';
  if (problem) throw new FlagError(`--configmap: ${JSON.stringify(text)} is ${problem}`);
  // The first --configmap replaces the default; further ones add to it.
  const earlier = draft.configMapsGiven ? draft.configMaps : [];
  draft.configMapsGiven = true;
  return Object.freeze([...earlier, text]);
}

/** The value as `parse` takes it, or a FlagError naming the flag. */
/** An address or a CIDR, as written (checked strictly: host bits of a CIDR must be clear). */
function parseAddressOrCidr(text: string): string {
  if (text.includes('/')) parseCidr(text);
  else parseAddress(text);
  return text;
}

/** --nat-stats-interval: a Go duration, `0` to turn the sampling off; at least 1 s otherwise. */
function parseStatsInterval(text: string): number {
  if (text.trim() === '0') return 0;
  const ms = parseGoDuration(text);
  if (typeof ms === 'string')
    throw new FlagError(`--nat-stats-interval: ${JSON.stringify(text)} ${ms}`);
  if (ms !== 0 && ms < 1_000)
    throw new FlagError(
      `--nat-stats-interval: ${JSON.stringify(text)} is below 1s (0 turns it off)`,
    );
  if (ms < 0) throw new FlagError(`--nat-stats-interval: ${JSON.stringify(text)} is negative`);
  return ms;
}

function checked<T>(flag: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof ValueError || err instanceof CidrError)
      throw new FlagError(`--${flag}: ${err.message}`);
    throw err;
  }
}

/** --node-name: a Kubernetes node name, as nodeNames entries are checked. */
function parseNodeNameFlag(text: string): string {
  return checked('node-name', () => parseNodeName(text));
}

/** --via: one interface, named as Linux names it (no wildcard: a packet leaves through one). */
function parseVia(text: string): string {
  if (text.endsWith('*')) throw new FlagError('--via: one interface, not a wildcard');
  return checked('via', () => parseInterfaceName(text));
}

/** --pod NAMESPACE/NAME: both names as the API server takes them (DNS labels / subdomains). */
function parsePodRef(text: string): string {
  const slash = text.indexOf('/');
  const namespace = text.slice(0, slash);
  const name = text.slice(slash + 1);
  const label = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
  const subdomain = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
  if (slash <= 0 || !label.test(namespace) || !subdomain.test(name))
    throw new FlagError(`--pod: ${JSON.stringify(text)} is not NAMESPACE/NAME`);
  return text;
}

/** --node-labels K=V,… (and --pod-labels, --namespace-labels): each checked as a label is. */
const parseLabels =
  (flag: LabelsFlag) =>
  (text: string): ReadonlyArray<readonly [string, string]> =>
    Object.freeze(
      // Given empty: no labels at all (a pod or namespace without any).
      (text === '' ? [] : text.split(',')).map((pair) => {
        const eq = pair.indexOf('=');
        if (eq <= 0) throw new FlagError(`--${flag}: ${JSON.stringify(pair)} is not KEY=VALUE`);
        const label: readonly [string, string] = [pair.slice(0, eq), pair.slice(eq + 1)];
        checked(flag, () => parseLabel(...label));
        return label;
      }),
    );

type LabelsFlag = 'node-labels' | 'pod-labels' | 'namespace-labels';

/** A flag of labels the modes evaluate selectors with (K=V,…; null when not given). */
const labelsFlag = (
  name: LabelsFlag,
  key: 'nodeLabels' | 'podLabels' | 'namespaceLabels',
  help: string,
): Flag => value(name, key, null, parseLabels(name), { arg: 'K=V,...', section: 'modes', help });

export const FLAGS: readonly Flag[] = [
  value(
    'config',
    'config',
    DEFAULT_CONFIG_PATH,
    (text, draft) => {
      if (text === '') throw new FlagError('--config: the path is empty');
      draft.configGiven = true;
      return text;
    },
    {
      arg: 'PATH',
      help: 'config file, or a directory whose ip-masq* files are merged',
    },
  ),
  value('masq-chain', 'masqChain', 'IP-MASQ-AGENT', checkMasqChain, {
    arg: 'NAME',
    help: 'chain holding the masquerade decision',
  }),
  bool(
    'nomasq-all-reserved-ranges',
    'nomasqAllReservedRanges',
    false,
    'also exempt the reserved IPv4 ranges by default',
  ),
  bool('enable-ipv6', 'enableIPv6', false, 'also manage the ip6 table and accept IPv6 CIDRs'),
  bool('random-fully', 'randomFully', true, 'masquerade with fully-random port selection'),
  value('to-ports', 'toPorts', Object.freeze([]), parsePortRanges, {
    arg: 'RANGES',
    help: 'source ports for tcp/udp/sctp, e.g. 1024-29999,32768-65535',
  }),
  value('table', 'table', 'ipmasq', (text) => checkName('table', text), {
    arg: 'NAME',
    help: "name of the agent's nftables tables",
  }),
  value('listen', 'listen', Object.freeze({ host: '0.0.0.0', port: 9410 }), parseListen, {
    arg: 'HOST:PORT',
    help: 'health and metrics server (IPv6 as [::]:9410)',
    shownDefault: '0.0.0.0:9410',
  }),
  bool(
    'remove-legacy-chain',
    'removeLegacyChain',
    false,
    "delete the original agent's leftover iptables chain",
  ),
  value('log-level', 'logLevel', 'info', (text) => oneOf('log-level', logLevels, text), {
    arg: 'LEVEL',
    help: logLevels.join(', '),
  }),
  value('set-layout', 'setLayout', 'auto', (text) => oneOf('set-layout', setLayouts, text), {
    arg: 'LAYOUT',
    help:
      `auto: interval up to ${AUTO_LAYOUT_CROSSOVER} CIDRs, concat above; interval: sets of ` +
      "addresses; concat: sets of address . protocol ranges, which other nftables tools' element " +
      'commands do not download',
  }),
  value(
    'conntrack-flush',
    'conntrackFlush',
    'udp',
    (text) => oneOf('conntrack-flush', conntrackFlushModes, text),
    {
      arg: 'WHICH',
      help:
        'after a config change, delete the conntrack entries of flows whose decision changed: udp ' +
        '(UDP and UDP-Lite), all (also resets TCP and SCTP connections), none',
    },
  ),
  value('nat-stats-interval', 'natStatsIntervalMs', 30_000, parseStatsInterval, {
    arg: 'DURATION',
    help:
      'how often the SNAT port headroom is sampled from conntrack (ipmasq_snat_port_usage_ratio, ' +
      'ipmasq_snat_flows); 0 turns it off',
    shownDefault: '30s',
  }),

  value('node-name', 'nodeName', '', parseNodeNameFlag, {
    arg: 'NAME',
    help: 'this node, for config files scoped with nodeNames',
    shownDefault: '$NODE_NAME',
    env: 'NODE_NAME',
  }),

  bool(
    'kubernetes',
    'kubernetes',
    false,
    "read this Node's labels and (when the config asks) every Node's pod CIDRs from the API server " +
      "with the pod's service account, and post Events on the Node",
  ),
  value(
    'kubeconfig',
    'kubeconfig',
    '',
    (text) => {
      if (text === '') throw new FlagError('--kubeconfig: the path is empty');
      return text;
    },
    { arg: 'PATH', help: 'as --kubernetes, with this kubeconfig instead of the service account' },
  ),

  value('widest-node-pod-cidr', 'widestNodePodCIDR', DEFAULT_WIDEST_NODE_POD_CIDR, parseWidest, {
    arg: 'LEN[,LEN6]',
    help:
      "the shortest prefix a Node's pod CIDR may have (IPv4, IPv6): a wider one is left out, with " +
      'a warning naming the Node',
    shownDefault: `${DEFAULT_WIDEST_NODE_POD_CIDR.ipv4},${DEFAULT_WIDEST_NODE_POD_CIDR.ipv6}`,
  }),

  mode('once', 'apply the config once, exit 0 on success, 1 on failure'),
  mode('render', 'print the nftables script for the current config, exit'),
  listMode(
    'explain',
    'explain',
    'ADDR [ADDR...]',
    'why traffic to each address is masqueraded or not, and which entries decide; with --live, ' +
      'from the tables in the kernel (root)',
  ),
  {
    name: 'live',
    kind: 'bool',
    section: 'modes',
    help: 'with --explain: answer from the tables in the kernel',
    option: { key: 'live', initial: false },
    apply: (on, draft) => (draft.live = on === true),
    goesWith: (draft) =>
      draft.live && !draft.modes.includes('explain') ? '--live goes with --explain' : undefined,
  },
  value(
    'diff',
    'proposed',
    '',
    (text, draft) => {
      setMode('diff', true, draft);
      return text;
    },
    {
      arg: 'PROPOSED',
      section: 'modes',
      help:
        'the destinations whose decision a proposed config file or directory changes; exit 0 when ' +
        'none, 1 when some, 2 on invalid input',
    },
  ),
  listMode(
    'check',
    'check',
    'PATH [PATH...]',
    "validate config files, directories and Kubernetes manifests (the agent's ConfigMap, as the " +
      'DaemonSet mounts it); exit 0 when all valid',
  ),
  goes(
    value('configmap', 'configMaps', Object.freeze([DEFAULT_CONFIGMAP]), parseConfigMapName, {
      arg: 'NS/NAME',
      section: 'modes',
      help: 'with --check: the ConfigMap(s) a manifest carries the config in; may be repeated',
      shownDefault: DEFAULT_CONFIGMAP,
    }),
    withModes('configmap', ['check'], '--check'),
  ),
  value('output', 'output', 'text', (text) => oneOf('output', outputs, text), {
    arg: 'FORMAT',
    section: 'modes',
    help: 'text or json, for --explain, --diff, --check and --flows',
  }),
  goes(
    value('from', 'from', '', (text) => checked('from', () => parseAddressOrCidr(text)), {
      arg: 'ADDR[/LEN]',
      section: 'modes',
      help:
        'with --explain or --diff: the source address to evaluate sourceCIDRs with; with --flows: ' +
        'only flows from this address or CIDR',
    }),
    (draft, given) =>
      withModes(
        'from',
        ['explain', 'diff', 'flows'],
        '--explain, --diff or --flows',
      )(draft, given) ??
      (!draft.modes.includes('flows') && draft.from.includes('/')
        ? `--from: with --explain or --diff, an address (not ${draft.from})`
        : undefined),
  ),
  goes(
    value('to', 'to', '', (text) => checked('to', () => parseAddressOrCidr(text)), {
      arg: 'ADDR|CIDR',
      section: 'modes',
      help: 'with --flows: only flows to this address or CIDR',
    }),
    withModes('to', ['flows'], '--flows'),
  ),
  mode(
    'flows',
    'print the translated flows now in conntrack, by source and destination, with each ' +
      "destination's port usage (root, in the node's network namespace)",
  ),
  goes(
    value('via', 'via', '', parseVia, {
      arg: 'IFACE',
      section: 'modes',
      help: 'with --explain or --diff: the egress interface to evaluate egressInterfaces with',
    }),
    withModes('via', ['explain', 'diff'], '--explain or --diff'),
  ),
  goes(
    labelsFlag(
      'node-labels',
      'nodeLabels',
      "with --explain or --diff: the node's labels, for files with nodeSelector",
    ),
    withModes('node-labels', ['explain', 'diff'], '--explain or --diff'),
  ),
  goes(
    labelsFlag(
      'pod-labels',
      'podLabels',
      "with --explain and --from: the labels of the pod that holds --from, for the pod policies' podSelector",
    ),
    withFrom('pod-labels'),
  ),
  goes(
    value('pod', 'pod', '', parsePodRef, {
      arg: 'NAMESPACE/NAME',
      section: 'modes',
      help: "with --explain and --kubeconfig or --kubernetes: the source is this pod (its address, its labels and its namespace's, read from the API server)",
    }),
    (draft, given) =>
      withModes('pod', ['explain'], '--explain')(draft, given) ??
      (given.has('from')
        ? '--pod gives the source: --from and --pod do not go together'
        : !usesApi(draft)
          ? '--pod reads the pod from the API server: give --kubeconfig or --kubernetes'
          : undefined),
  ),
  goes(
    labelsFlag(
      'namespace-labels',
      'namespaceLabels',
      "with --explain and --from: the labels of that pod's namespace, for the pod policies' namespaceSelector",
    ),
    withFrom('namespace-labels'),
  ),
  mode('cleanup', "delete the agent's ip/ip6 tables, exit"),
  mode('version', 'print the version, exit'),
];

const byName = new Map(FLAGS.map((flag) => [flag.name, flag]));

/** Greedy word wrap of `text` into lines of at most `width` characters. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines;
}

const HELP_COLUMN = 32;
const WIDTH = 102;

function usageEntries(section: Flag['section']): string {
  return FLAGS.filter((flag) => flag.section === section)
    .map((flag) => {
      const head = `  --${flag.name}${flag.arg ? ` ${flag.arg}` : ''}`;
      const help =
        flag.shownDefault === undefined ? flag.help : `${flag.help} (default ${flag.shownDefault})`;
      const [first = '', ...rest] = wrap(help, WIDTH - HELP_COLUMN);
      const lines =
        head.length < HELP_COLUMN
          ? [head.padEnd(HELP_COLUMN) + first]
          : [head, ' '.repeat(HELP_COLUMN) + first];
      return [...lines, ...rest.map((line) => ' '.repeat(HELP_COLUMN) + line)].join('\n');
    })
    .join('\n');
}

export const usage = `Usage: ipmasq-agent [flags]

Flags may be written --flag value, --flag=value, -flag value or -flag=value.
Booleans may be given bare (--flag) or as --flag=true / --flag=false.

${usageEntries('flags')}

Modes (at most one; without one the agent runs until SIGTERM):
${usageEntries('modes')}

klog flags (-v, --logtostderr, --alsologtostderr, --stderrthreshold, --log_dir, --log_file,
--vmodule) are accepted and ignored.
`;

function initialDraft(): Draft {
  const draft: Record<string, unknown> = {
    mode: 'run',
    configGiven: false,
    configMapsGiven: false,
    modes: [],
  };
  for (const flag of FLAGS) if (flag.option) draft[flag.option.key] = flag.option.initial;
  return draft as Draft;
}

const klogValueFlags = new Set(['v', 'stderrthreshold', 'log_dir', 'log_file', 'vmodule']);
const klogBoolFlags = new Set(['logtostderr', 'alsologtostderr']);

function looksLikeFlag(arg: string): boolean {
  return arg.length > 1 && arg.startsWith('-');
}

/**
 * Reads the command line into `draft`: each flag given is added to `given`, each klog flag (taken
 * and ignored, as the original agent's command line may carry them) to `ignoredKlog`. Throws a
 * FlagError on anything it does not take.
 */
function readArgv(
  argv: readonly string[],
  draft: Draft,
  given: Set<string>,
  ignoredKlog: string[],
): void {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      // Go's flag package stops at `--`; this agent takes no positional arguments after it either.
      const rest = argv[i + 1];
      if (rest !== undefined) throw new FlagError(`unexpected argument ${JSON.stringify(rest)}`);
      break;
    }
    // --explain and --check take any number of addresses or paths after their first.
    const collecting = byName.get(draft.modes.at(-1) ?? '');
    if (!looksLikeFlag(arg) && collecting?.more) {
      collecting.apply(arg, draft);
      continue;
    }
    if (!looksLikeFlag(arg)) {
      const previous = argv[i - 1];
      const hint =
        boolSpellings.has(arg) && previous !== undefined && looksLikeFlag(previous)
          ? ` (a boolean takes its value after "=", e.g. ${previous.split('=')[0]}=${arg})`
          : '';
      throw new FlagError(`unexpected argument ${JSON.stringify(arg)}${hint}`);
    }
    const body = arg.startsWith('--') ? arg.slice(2) : arg.slice(1);
    const eq = body.indexOf('=');
    const name = eq === -1 ? body : body.slice(0, eq);
    const inlineValue = eq === -1 ? undefined : body.slice(eq + 1);
    if (name === '' || name.startsWith('-')) {
      throw new FlagError(`bad flag syntax: ${JSON.stringify(arg)}`);
    }
    if (name === 'h' || name === 'help') throw new HelpRequested();

    const flag = byName.get(name);
    if (flag) given.add(flag.name);
    if (flag?.kind === 'value') {
      let value = inlineValue;
      if (value === undefined) {
        const next = argv[i + 1];
        if (next === undefined || looksLikeFlag(next)) {
          throw new FlagError(`--${name} needs a value`);
        }
        value = next;
        i++;
      }
      flag.apply(value, draft);
    } else if (flag) {
      let on = true;
      if (inlineValue !== undefined) {
        const parsed = boolSpellings.get(inlineValue);
        if (parsed === undefined) {
          throw new FlagError(
            `--${name}: ${JSON.stringify(inlineValue)} is not a boolean (use true or false)`,
          );
        }
        on = parsed;
      }
      flag.apply(on, draft);
    } else if (klogValueFlags.has(name) || klogBoolFlags.has(name)) {
      // klog value flags may come as `-v 2`; a following flag means the value was left out.
      const next = argv[i + 1];
      if (klogValueFlags.has(name) && inlineValue === undefined && next !== undefined) {
        if (!looksLikeFlag(next)) i++;
      }
      const spelled = name.length === 1 ? `-${name}` : `--${name}`;
      if (!ignoredKlog.includes(spelled)) ignoredKlog.push(spelled);
    } else {
      throw new FlagError(`unknown flag: ${arg.split('=')[0]}`);
    }
  }
}

/** Each flag not given on the command line from its environment variable, where it has one. */
function readEnv(
  draft: Draft,
  given: ReadonlySet<string>,
  env: Readonly<Record<string, string | undefined>>,
): void {
  for (const flag of FLAGS) {
    const fallback = flag.env === undefined ? undefined : env[flag.env];
    if (given.has(flag.name) || fallback === undefined || fallback === '') continue;
    try {
      flag.apply(fallback, draft);
    } catch (err) {
      if (!(err instanceof FlagError)) throw err;
      throw new FlagError(`${flag.env} (standing for --${flag.name}): ${err.message}`);
    }
  }
}

/** Throws a FlagError where the flags given do not go together (each FLAGS entry's goesWith). */
function checkTogether(draft: Draft, given: ReadonlySet<string>): void {
  for (const flag of FLAGS) {
    const problem = given.has(flag.name) ? flag.goesWith?.(draft, given) : undefined;
    if (problem !== undefined) throw new FlagError(problem);
  }
  const api = usesApi(draft);
  const onNode = draft.modes.length === 0 || draft.modes.includes('once');
  if (api && onNode && draft.nodeName === '') {
    throw new FlagError(
      "--kubernetes and --kubeconfig need the node's name: --node-name, or NODE_NAME (the DaemonSet sets it from spec.nodeName)",
    );
  }
  if (draft.modes.length > 1) {
    throw new FlagError(
      `${draft.modes.map((m) => `--${m}`).join(' and ')} cannot be used together`,
    );
  }
}

export function parseArgs(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = process.env,
): ParseResult {
  const draft = initialDraft();
  const ignoredKlogFlags: string[] = [];
  const given = new Set<string>();
  try {
    readArgv(argv, draft, given, ignoredKlogFlags);
    readEnv(draft, given, env);
    checkTogether(draft, given);
  } catch (err) {
    if (!(err instanceof FlagError)) throw err;
    const message =
      err instanceof HelpRequested ? usage : `ipmasq-agent: ${err.message}\n\n${usage}`;
    return { ok: false, exitCode: 2, message };
  }

  const { modes, ...options } = draft;
  options.mode = modes[0] ?? 'run';
  const warnings =
    ignoredKlogFlags.length === 0
      ? []
      : [
          `ignoring klog flags ${ignoredKlogFlags.join(', ')}: ` +
            'this agent logs JSON through pino; use --log-level instead',
        ];
  return { ok: true, options: Object.freeze(options), warnings };
}

// Command-line flags (README, "Flags"), parsed by hand because existing manifests use Go's flag syntax:
// `-flag=value` and `-flag value` with one dash, `--flag` for booleans, and klog flags we must tolerate.
// Over 200 lines because it holds the usage text and one parser per value flag; it maps nothing
// further: options.ts turns the result into each stage's options.
import { isIPv4, isIPv6 } from 'node:net';
import {
  AUTO_LAYOUT_CROSSOVER,
  BASE_CHAIN,
  LATE_REPLIES_CHAIN,
  setLayouts,
  type PortRange,
} from '../compile.js';
import { nameProblem } from '../nftables/names.js';
import { conntrackFlushModes } from '../reconcile/conntrack.js';
import { logLevels, outputs, type AgentOptions, type Mode } from '../options.js';

export type { AgentOptions } from '../options.js';

export type ParseResult =
  | { ok: true; options: AgentOptions; warnings: string[] }
  | { ok: false; exitCode: 2; message: string };

export const usage = `Usage: ipmasq-agent [flags]

Flags may be written --flag value, --flag=value, -flag value or -flag=value.
Booleans may be given bare (--flag) or as --flag=true / --flag=false.

  --config PATH                 config file, or a directory whose ip-masq* files are merged
                                (default /etc/config/ip-masq-agent)
  --masq-chain NAME             chain holding the masquerade decision (default IP-MASQ-AGENT)
  --nomasq-all-reserved-ranges  also exempt the reserved IPv4 ranges by default (default false)
  --enable-ipv6                 also manage the ip6 table and accept IPv6 CIDRs (default false)
  --random-fully                masquerade with fully-random port selection (default true)
  --to-ports RANGES             source ports for tcp/udp/sctp, e.g. 1024-29999,32768-65535
  --table NAME                  name of the agent's nftables tables (default ipmasq)
  --listen HOST:PORT            health and metrics server (default 0.0.0.0:9410; IPv6 as [::]:9410)
  --remove-legacy-chain         delete the original agent's leftover iptables chain (default false)
  --log-level LEVEL             ${logLevels.join(', ')} (default info)
  --set-layout LAYOUT           auto (default): interval up to ${AUTO_LAYOUT_CROSSOVER} CIDRs, concat above;
                                interval: sets of addresses; concat: sets of address . protocol
                                ranges, which other nftables tools' element commands do not download
  --conntrack-flush WHICH       after a config change, delete the conntrack entries of flows whose
                                decision changed: udp (default; UDP and UDP-Lite), all (also resets
                                TCP and SCTP connections), none

Modes (at most one; without one the agent runs until SIGTERM):
  --once                        apply the config once, exit 0 on success, 1 on failure
  --render                      print the nftables script for the current config, exit
  --explain ADDR [ADDR...]      why traffic to each address is masqueraded or not, and which entries
                                decide; with --live, from the tables in the kernel (root)
  --diff PROPOSED               the destinations whose decision a proposed config file or directory
                                changes; exit 0 when none, 1 when some, 2 on invalid input
  --check PATH [PATH...]        validate config files, directories and Kubernetes manifests
                                (ConfigMaps with a config or ip-masq* key); exit 0 when all valid
  --output FORMAT               text (default) or json, for --explain, --diff and --check
  --cleanup                     delete the agent's ip/ip6 tables, exit
  --version                     print the version, exit

klog flags (-v, --logtostderr, --alsologtostderr, --stderrthreshold, --log_dir, --log_file,
--vmodule) are accepted and ignored.
`;

/** A reason the command line cannot be used; turned into the exit-2 result at the top. */
class FlagError extends Error {}
/** -h / --help: Go's flag package prints usage for it; our result type has only exit code 2. */
class HelpRequested extends FlagError {}

type Draft = { -readonly [K in keyof AgentOptions]: AgentOptions[K] } & { modes: Mode[] };

function checkName(flag: string, value: string): string {
  const problem = nameProblem(value);
  if (problem) throw new FlagError(`--${flag}: ${JSON.stringify(value)} is ${problem}`);
  return value;
}

/** The base chains are called postrouting and prerouting: the decision chain needs a name of its own. */
function checkMasqChain(value: string): string {
  checkName('masq-chain', value);
  if (value === BASE_CHAIN || value === LATE_REPLIES_CHAIN) {
    throw new FlagError(`--masq-chain: "${value}" is the name of one of the agent's base chains`);
  }
  return value;
}

function oneOf<T extends string>(flag: string, choices: readonly T[], value: string): T {
  const choice = choices.find((c) => c === value);
  if (!choice) throw new FlagError(`--${flag}: "${value}" is not one of ${choices.join(', ')}`);
  return choice;
}

function parsePort(text: string, min: number, context: string): number {
  if (!/^\d{1,5}$/.test(text)) throw new FlagError(`${context}: "${text}" is not a port number`);
  const port = Number(text);
  if (port < min || port > 65535) {
    throw new FlagError(`${context}: port ${port} is out of range ${min}-65535`);
  }
  return port;
}

export function parsePortRanges(value: string): readonly PortRange[] {
  // An empty value is the same as leaving the flag out: any source port.
  if (value === '') return Object.freeze([]);
  const ranges = value.split(',').map((item, index) => {
    const context = `--to-ports item ${index + 1} ${JSON.stringify(item)}`;
    if (item === '') throw new FlagError(`${context}: empty item`);
    const match = /^([^-]*)(?:-(.*))?$/.exec(item);
    const firstText = match?.[1] ?? '';
    const lastText = match?.[2] ?? firstText;
    const first = parsePort(firstText, 1, context);
    const last = parsePort(lastText, 1, context);
    if (first > last) throw new FlagError(`${context}: first port ${first} is above last ${last}`);
    return Object.freeze({ first, last });
  });
  ranges.sort((a, b) => a.first - b.first);
  for (let i = 1; i < ranges.length; i++) {
    const previous = ranges[i - 1]!;
    const current = ranges[i]!;
    if (current.first <= previous.last) {
      throw new FlagError(
        `--to-ports: ranges ${previous.first}-${previous.last} and ` +
          `${current.first}-${current.last} overlap`,
      );
    }
  }
  return Object.freeze(ranges);
}

const hostnamePattern =
  /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

export function parseListen(value: string): { readonly host: string; readonly port: number } {
  const context = `--listen ${JSON.stringify(value)}`;
  let host: string;
  let portText: string;
  if (value.startsWith('[')) {
    const match = /^\[([^\]]+)\]:([^:]*)$/.exec(value);
    if (!match || !isIPv6(match[1]!)) {
      throw new FlagError(`${context}: expected [IPv6]:PORT, e.g. [::]:9410`);
    }
    host = match[1]!;
    portText = match[2]!;
  } else {
    const colon = value.lastIndexOf(':');
    if (colon === -1) throw new FlagError(`${context}: expected HOST:PORT, e.g. 0.0.0.0:9410`);
    host = value.slice(0, colon);
    portText = value.slice(colon + 1);
    if (host.includes(':')) {
      throw new FlagError(`${context}: an IPv6 address needs brackets, e.g. [::]:9410`);
    }
    // Go's `:PORT` means every address; our default spells that 0.0.0.0.
    if (host === '') host = '0.0.0.0';
    const looksNumeric = /^[\d.]+$/.test(host);
    if (looksNumeric ? !isIPv4(host) : !hostnamePattern.test(host)) {
      throw new FlagError(`${context}: "${host}" is not an IP address or host name`);
    }
  }
  return Object.freeze({ host, port: parsePort(portText, 0, context) });
}

// Go's strconv.ParseBool spellings.
const boolSpellings = new Map<string, boolean>([
  ...['1', 't', 'T', 'TRUE', 'true', 'True'].map((s) => [s, true] as const),
  ...['0', 'f', 'F', 'FALSE', 'false', 'False'].map((s) => [s, false] as const),
]);

// Maps, not object literals, so that names like `constructor` are never mistaken for flags.
const valueFlags = new Map<string, (value: string, draft: Draft) => void>([
  [
    'config',
    (value, draft) => {
      if (value === '') throw new FlagError('--config: the path is empty');
      draft.config = value;
    },
  ],
  ['masq-chain', (value, draft) => (draft.masqChain = checkMasqChain(value))],
  ['table', (value, draft) => (draft.table = checkName('table', value))],
  ['to-ports', (value, draft) => (draft.toPorts = parsePortRanges(value))],
  ['listen', (value, draft) => (draft.listen = parseListen(value))],
  ['set-layout', (value, draft) => (draft.setLayout = oneOf('set-layout', setLayouts, value))],
  ['log-level', (value, draft) => (draft.logLevel = oneOf('log-level', logLevels, value))],
  [
    'explain',
    (value, draft) => {
      modeFlag('explain')(true, draft);
      draft.explain = [...draft.explain, value];
    },
  ],
  [
    'check',
    (value, draft) => {
      modeFlag('check')(true, draft);
      draft.check = [...draft.check, value];
    },
  ],
  [
    'diff',
    (value, draft) => {
      modeFlag('diff')(true, draft);
      draft.proposed = value;
    },
  ],
  ['output', (value, draft) => (draft.output = oneOf('output', outputs, value))],
  [
    'conntrack-flush',
    (value, draft) => (draft.conntrackFlush = oneOf('conntrack-flush', conntrackFlushModes, value)),
  ],
]);

function modeFlag(mode: Mode) {
  return (on: boolean, draft: Draft) => {
    if (on && !draft.modes.includes(mode)) draft.modes.push(mode);
    if (!on) draft.modes = draft.modes.filter((m) => m !== mode);
  };
}

const boolFlags = new Map<string, (on: boolean, draft: Draft) => void>([
  ['nomasq-all-reserved-ranges', (on, draft) => (draft.nomasqAllReservedRanges = on)],
  ['enable-ipv6', (on, draft) => (draft.enableIPv6 = on)],
  ['random-fully', (on, draft) => (draft.randomFully = on)],
  ['remove-legacy-chain', (on, draft) => (draft.removeLegacyChain = on)],
  ['live', (on, draft) => (draft.live = on)],
  ['once', modeFlag('once')],
  ['render', modeFlag('render')],
  ['cleanup', modeFlag('cleanup')],
  ['version', modeFlag('version')],
]);

const klogValueFlags = new Set(['v', 'stderrthreshold', 'log_dir', 'log_file', 'vmodule']);
const klogBoolFlags = new Set(['logtostderr', 'alsologtostderr']);

function looksLikeFlag(arg: string): boolean {
  return arg.length > 1 && arg.startsWith('-');
}

export function parseArgs(argv: readonly string[]): ParseResult {
  const draft: Draft = {
    config: '/etc/config/ip-masq-agent',
    masqChain: 'IP-MASQ-AGENT',
    nomasqAllReservedRanges: false,
    enableIPv6: false,
    randomFully: true,
    toPorts: Object.freeze([]),
    table: 'ipmasq',
    listen: Object.freeze({ host: '0.0.0.0', port: 9410 }),
    mode: 'run',
    removeLegacyChain: false,
    logLevel: 'info',
    setLayout: 'auto',
    conntrackFlush: 'udp',
    explain: Object.freeze([]),
    live: false,
    proposed: '',
    check: Object.freeze([]),
    output: 'text',
    modes: [],
  };
  const ignoredKlogFlags: string[] = [];
  try {
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]!;
      if (arg === '--') {
        // Go's flag package stops at `--`; this agent takes no positional arguments after it either.
        const rest = argv[i + 1];
        if (rest !== undefined) throw new FlagError(`unexpected argument ${JSON.stringify(rest)}`);
        break;
      }
      // --explain and --check take any number of addresses or paths after their first.
      if (!looksLikeFlag(arg) && draft.modes.at(-1) === 'explain') {
        draft.explain = [...draft.explain, arg];
        continue;
      }
      if (!looksLikeFlag(arg) && draft.modes.at(-1) === 'check') {
        draft.check = [...draft.check, arg];
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

      const applyValue = valueFlags.get(name);
      const applyBool = boolFlags.get(name);
      if (applyValue) {
        let value = inlineValue;
        if (value === undefined) {
          const next = argv[i + 1];
          if (next === undefined || looksLikeFlag(next)) {
            throw new FlagError(`--${name} needs a value`);
          }
          value = next;
          i++;
        }
        applyValue(value, draft);
      } else if (applyBool) {
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
        applyBool(on, draft);
      } else if (klogValueFlags.has(name) || klogBoolFlags.has(name)) {
        // klog value flags may come as `-v 2`; a following flag means the value was left out.
        const next = argv[i + 1];
        if (klogValueFlags.has(name) && inlineValue === undefined && next !== undefined) {
          if (!looksLikeFlag(next)) i++;
        }
        const spelled = name.length === 1 ? `-${name}` : `--${name}`;
        if (!ignoredKlogFlags.includes(spelled)) ignoredKlogFlags.push(spelled);
      } else {
        throw new FlagError(`unknown flag: ${arg.split('=')[0]}`);
      }
    }
    if (draft.live && !draft.modes.includes('explain')) {
      throw new FlagError('--live goes with --explain');
    }
    if (draft.modes.length > 1) {
      throw new FlagError(
        `${draft.modes.map((m) => `--${m}`).join(' and ')} cannot be used together`,
      );
    }
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

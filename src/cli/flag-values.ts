// The parsers of the flags' values (README, "Flags"): each returns the option's value or throws a
// FlagError naming the flag and what is wrong with the value.
import { isIPv4, isIPv6 } from 'node:net';
import type { PortRange } from '../decision.js';
import { BASE_CHAIN, LATE_REPLIES_CHAIN } from '../nftables/objects.js';
import { nameProblem } from '../nftables/names.js';

/** A reason the command line cannot be used; turned into the exit-2 result by parseArgs. */
export class FlagError extends Error {}

export function checkName(flag: string, value: string): string {
  const problem = nameProblem(value);
  if (problem) throw new FlagError(`--${flag}: ${JSON.stringify(value)} is ${problem}`);
  return value;
}

/** The base chains are called postrouting and prerouting: the decision chain needs a name of its own. */
export function checkMasqChain(value: string): string {
  checkName('masq-chain', value);
  if (value === BASE_CHAIN || value === LATE_REPLIES_CHAIN) {
    throw new FlagError(`--masq-chain: "${value}" is the name of one of the agent's base chains`);
  }
  return value;
}

export function oneOf<T extends string>(flag: string, choices: readonly T[], value: string): T {
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

// --flows at scale, for the test and the bench alike: the conntrack filler (bench/ct-fill.c, built
// here with cc), and the peak RSS of one `ipmasq-agent --flows` run, from wait4's rusage through
// python3, its output read as it comes and counted (docs/observability.md, "What the node's NAT
// does").
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { agentBin } from './agent.js';
import { inNetns, packageRoot } from './netns.js';

/** Builds bench/ct-fill.c into `dir`; returns its path. */
export function buildConntrackFill(dir: string): string {
  const fill = join(dir, 'ct-fill');
  execFileSync('cc', [
    '-O2',
    '-o',
    fill,
    join(packageRoot, 'bench', 'ct-fill.c'),
    '-lnetfilter_conntrack',
  ]);
  return fill;
}

/** The peak RSS (MiB) of `--flows --output OUTPUT` in `ns`, and how many bytes it printed. */
export async function flowsPeak(
  ns: string,
  output: 'text' | 'json',
): Promise<{ mib: number; bytes: number }> {
  const script =
    'import resource, subprocess, sys\n' +
    'child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n' +
    'size = 0\n' +
    'while chunk := child.stdout.read(1 << 16): size += len(chunk)\n' +
    'child.wait()\n' +
    'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, size)\n';
  // Without a test runner's NODE_OPTIONS (its loaders are memory of their own), as an operator runs
  // it.
  const { stdout } = await inNetns(
    ns,
    'env',
    [
      '-u',
      'NODE_OPTIONS',
      'python3',
      '-c',
      script,
      process.execPath,
      agentBin,
      '--flows',
      '--output',
      output,
    ],
    { timeoutMs: 300_000 },
  );
  const [kib, bytes] = stdout.trim().split(' ').map(Number);
  return { mib: kib! / 1024, bytes: bytes! };
}

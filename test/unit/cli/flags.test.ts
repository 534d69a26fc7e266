import t from 'tap';
import { FLAGS, parseArgs, usage, type AgentOptions } from '../../../src/cli/flags.js';

function options(argv: string[]): AgentOptions {
  const result = parseArgs(argv, {});
  if (!result.ok) throw new Error(`expected ${JSON.stringify(argv)} to parse: ${result.message}`);
  return result.options;
}

function failure(argv: string[]): string {
  const result = parseArgs(argv, {});
  if (result.ok) throw new Error(`expected ${JSON.stringify(argv)} to fail`);
  if (result.exitCode !== 2) throw new Error(`exit code ${String(result.exitCode)}`);
  return result.message;
}

t.test('defaults', async (t) => {
  const result = parseArgs([], {});
  t.same(result, {
    ok: true,
    warnings: [],
    options: {
      config: '/etc/config/ip-masq-agent',
      configGiven: false,
      masqChain: 'IP-MASQ-AGENT',
      nomasqAllReservedRanges: false,
      enableIPv6: false,
      randomFully: true,
      toPorts: [],
      table: 'ipmasq',
      listen: { host: '0.0.0.0', port: 9410 },
      mode: 'run',
      removeLegacyChain: false,
      logLevel: 'info',
      setLayout: 'auto',
      conntrackFlush: 'udp',
      explain: [],
      live: false,
      proposed: '',
      check: [],
      configMaps: ['kube-system/ip-masq-agent'],
      configMapsGiven: false,
      output: 'text',
      nodeName: '',
      from: '',
      to: '',
      natStatsIntervalMs: 30_000,
      via: '',
      nodeLabels: null,
      podLabels: null,
      namespaceLabels: null,
      pod: '',
      kubernetes: false,
      kubeconfig: '',
      widestNodePodCIDR: { ipv4: 16, ipv6: 48 },
    },
  });
});

t.test('--widest-node-pod-cidr: LEN or LEN,LEN6, each in its range', async (t) => {
  const widest = (value: string) => {
    const result = parseArgs([`--widest-node-pod-cidr=${value}`], {});
    return result.ok ? result.options.widestNodePodCIDR : result.message.split('\n')[0];
  };
  t.same(widest('8'), { ipv4: 8, ipv6: 48 });
  t.same(widest('20,56'), { ipv4: 20, ipv6: 56 });
  t.same(widest('/12,/40'), { ipv4: 12, ipv6: 40 });
  for (const bad of ['33', '16,129', '', 'a', '16,', '1,2,3', '-1']) {
    t.match(widest(bad), /--widest-node-pod-cidr: .* is not LEN or LEN,LEN6/, bad);
  }
});

t.test(
  '--from, --via and --node-labels describe a flow and a node for --explain and --diff',
  async (t) => {
    const parsed = (argv: string[]) => {
      const result = parseArgs(argv, {});
      return result.ok ? result.options : result.message.split('\n')[0];
    };
    const ok = parsed([
      '--explain',
      '1.2.3.4',
      '--from',
      '10.244.0.1',
      '--via',
      'eth1',
      '--node-labels',
      'pool=gpu,zone=',
    ]);
    t.match(ok, {
      from: '10.244.0.1',
      via: 'eth1',
      nodeLabels: [
        ['pool', 'gpu'],
        ['zone', ''],
      ],
    });
    t.match(parsed(['--via', 'eth1']), /^ipmasq-agent: --via goes with --explain or --diff$/);
    t.match(
      parsed(['--explain', '1.2.3.4', '--via', 'eth*']),
      /--via: one interface, not a wildcard/,
    );
    t.match(
      parsed(['--explain', '1.2.3.4', '--via', 'eth0/1']),
      /--via: "eth0\/1" is not a valid interface name/,
    );
    t.match(parsed(['--explain', '1.2.3.4', '--from', '10.0.0.0/8']), /^ipmasq-agent: --from: /);
    t.match(
      parsed(['--diff', 'x', '--node-labels', 'pool']),
      /--node-labels: "pool" is not KEY=VALUE/,
    );
    t.match(
      parsed(['--diff', 'x', '--node-labels', 'a b=c']),
      /--node-labels: "a b" is not a label key/,
    );
  },
);

t.test('--node-name: given, from NODE_NAME, checked as a node name', async (t) => {
  const nodeName = (argv: string[], env: Record<string, string> = {}) => {
    const parsed = parseArgs(argv, env);
    return parsed.ok ? parsed.options.nodeName : parsed.message.split('\n')[0];
  };
  t.equal(nodeName(['--node-name', 'gpu-1']), 'gpu-1');
  t.equal(nodeName([], { NODE_NAME: 'worker-7' }), 'worker-7', 'the DaemonSet sets NODE_NAME');
  t.equal(nodeName(['--node-name=a'], { NODE_NAME: 'b' }), 'a', 'the flag wins over NODE_NAME');
  t.equal(nodeName([], { NODE_NAME: '' }), '', 'empty: not known');
  t.match(
    nodeName(['--node-name', 'Bad_Name']),
    /^ipmasq-agent: --node-name: "Bad_Name" is not a node name/,
  );
  t.match(
    nodeName([], { NODE_NAME: 'a\nb' }),
    /^ipmasq-agent: NODE_NAME \(standing for --node-name\): --node-name: "a\\nb" is not a node name/,
  );
});

t.test('value flags in every spelling', async (t) => {
  const spellings: [string, string[]][] = [
    ['--flag value', ['--config', '/cfg']],
    ['--flag=value', ['--config=/cfg']],
    ['-flag value', ['-config', '/cfg']],
    ['-flag=value', ['-config=/cfg']],
  ];
  for (const [name, argv] of spellings) t.equal(options(argv).config, '/cfg', name);
  t.equal(options(['--config=/a=b']).config, '/a=b', 'only the first "=" splits');
  t.equal(options(['--table', 't1', '--table=t2']).table, 't2', 'last one wins, as in Go');
});

t.test('every value flag sets its option', async (t) => {
  const parsed = options([
    '--masq-chain=IP-MASQ',
    '-table',
    'my_table-2',
    '--to-ports',
    '8000',
    '--listen=[::1]:9999',
    '-log-level=debug',
  ]);
  t.equal(parsed.masqChain, 'IP-MASQ');
  t.equal(parsed.table, 'my_table-2');
  t.same(parsed.toPorts, [{ first: 8000, last: 8000 }]);
  t.same(parsed.listen, { host: '::1', port: 9999 });
  t.equal(parsed.logLevel, 'debug');
});

t.test('boolean flags', async (t) => {
  const flags: [string, keyof AgentOptions, boolean][] = [
    ['nomasq-all-reserved-ranges', 'nomasqAllReservedRanges', false],
    ['enable-ipv6', 'enableIPv6', false],
    ['random-fully', 'randomFully', true],
    ['remove-legacy-chain', 'removeLegacyChain', false],
  ];
  const trueSpellings = ['1', 't', 'T', 'TRUE', 'true', 'True'];
  const falseSpellings = ['0', 'f', 'F', 'FALSE', 'false', 'False'];
  for (const [flag, key, byDefault] of flags) {
    t.equal(options([])[key], byDefault, `${flag} default`);
    t.equal(options([`--${flag}`])[key], true, `bare --${flag}`);
    t.equal(options([`-${flag}`])[key], true, `bare -${flag}`);
    for (const s of trueSpellings) t.equal(options([`--${flag}=${s}`])[key], true, `${flag}=${s}`);
    for (const s of falseSpellings) t.equal(options([`-${flag}=${s}`])[key], false, `${flag}=${s}`);
  }
  t.equal(options(['--random-fully=false']).randomFully, false);
});

t.test('a bare boolean does not take the next argument', async (t) => {
  const parsed = options(['--enable-ipv6', '--table', 'x']);
  t.equal(parsed.enableIPv6, true);
  t.equal(parsed.table, 'x');
  const message = failure(['--random-fully', 'false']);
  t.match(message, /unexpected argument "false"/);
  t.match(message, /--random-fully=false/, 'hints at the "=" form');
});

t.test('upstream manifest arguments', async (t) => {
  const manifests: [string[], Partial<AgentOptions>, string[]][] = [
    [
      ['--masq-chain=IP-MASQ', '--nomasq-all-reserved-ranges'],
      { masqChain: 'IP-MASQ', nomasqAllReservedRanges: true },
      [],
    ],
    [['--v=2', '--logtostderr'], {}, ['-v', '--logtostderr']],
    [
      ['--nomasq-all-reserved-ranges', '--v=2', '--logtostderr', '--enable-ipv6'],
      { nomasqAllReservedRanges: true, enableIPv6: true },
      ['-v', '--logtostderr'],
    ],
  ];
  for (const [argv, expected, klog] of manifests) {
    const result = parseArgs(argv, {});
    t.ok(result.ok, argv.join(' '));
    if (!result.ok) continue;
    t.match(result.options, expected, argv.join(' '));
    t.equal(result.warnings.length, klog.length === 0 ? 0 : 1, 'at most one warning');
    for (const flag of klog) t.match(result.warnings[0] ?? '', flag);
  }
});

t.test('klog flags are ignored with one warning naming them', async (t) => {
  const spellings = [
    ['--v=2'],
    ['-v=2'],
    ['-v', '2'],
    ['--v', '2'],
    ['-v'],
    ['--logtostderr'],
    ['--logtostderr=true'],
    ['-logtostderr=false'],
    ['--alsologtostderr'],
    ['--stderrthreshold=INFO'],
    ['-stderrthreshold', '2'],
    ['--log_dir=/var/log'],
    ['--log_dir', '/var/log'],
    ['--log_file=/tmp/x.log'],
    ['--vmodule=foo=2,bar=3'],
    ['--vmodule'],
  ];
  for (const argv of spellings) {
    const result = parseArgs([...argv, '--table=after']);
    t.ok(result.ok, argv.join(' '));
    if (!result.ok) continue;
    t.equal(result.options.table, 'after', `${argv.join(' ')} leaves the next flag alone`);
    t.equal(result.warnings.length, 1);
  }
  const all = parseArgs([
    '-v',
    '4',
    '--logtostderr',
    '--alsologtostderr=false',
    '--stderrthreshold',
    'ERROR',
    '-log_dir=/l',
    '--log_file',
    '/f',
    '--vmodule=x=1',
    '--v=5',
  ]);
  t.ok(all.ok);
  if (all.ok) {
    t.equal(all.warnings.length, 1, 'one warning in total');
    const warning = all.warnings[0] ?? '';
    for (const flag of [
      '-v',
      '--logtostderr',
      '--alsologtostderr',
      '--stderrthreshold',
      '--log_dir',
      '--log_file',
      '--vmodule',
    ]) {
      t.ok(warning.includes(flag), `warning names ${flag}`);
    }
    t.same(all.options, options([]), 'nothing else changed');
  }
});

t.test('modes', async (t) => {
  t.equal(options([]).mode, 'run');
  for (const mode of ['once', 'render', 'cleanup', 'version'] as const) {
    t.equal(options([`--${mode}`]).mode, mode);
    t.equal(options([`-${mode}`]).mode, mode);
    t.equal(options([`--${mode}=true`]).mode, mode);
    t.equal(options([`--${mode}=false`]).mode, 'run');
  }
  t.equal(options(['--once', '--once']).mode, 'once', 'the same mode twice is one mode');
  t.match(failure(['--once', '--render']), /--once and --render cannot be used together/);
  t.match(failure(['--cleanup', '-version']), /--cleanup and --version/);
  t.equal(options(['--once', '--render', '--render=false']).mode, 'once');
});

t.test('--to-ports', async (t) => {
  t.same(options(['--to-ports=1024-29999,32768-65535']).toPorts, [
    { first: 1024, last: 29999 },
    { first: 32768, last: 65535 },
  ]);
  t.same(
    options(['--to-ports', '32768-65535,1024-29999']).toPorts,
    [
      { first: 1024, last: 29999 },
      { first: 32768, last: 65535 },
    ],
    'sorted',
  );
  t.same(options(['--to-ports=8000']).toPorts, [{ first: 8000, last: 8000 }]);
  t.same(options(['--to-ports=1-1,2-3,65535']).toPorts, [
    { first: 1, last: 1 },
    { first: 2, last: 3 },
    { first: 65535, last: 65535 },
  ]);
  t.same(options(['--to-ports=']).toPorts, [], 'empty value means no restriction');

  const malformed: [string, RegExp][] = [
    ['abc', /"abc" is not a port number/],
    ['80a', /not a port number/],
    ['0', /port 0 is out of range 1-65535/],
    ['0-100', /port 0 is out of range/],
    ['65536', /port 65536 is out of range/],
    ['1000-70000', /port 70000 is out of range/],
    ['123456', /not a port number/],
    ['3000-2000', /first port 3000 is above last 2000/],
    ['1000-2000,1500-2500', /ranges 1000-2000 and 1500-2500 overlap/],
    ['2000-3000,1000-2000', /ranges 1000-2000 and 2000-3000 overlap/],
    ['8000,8000', /overlap/],
    ['1000-2000,,3000', /item 2 "": empty item/],
    ['1000,', /empty item/],
    [',1000', /empty item/],
    ['1000-', /"" is not a port number/],
    ['1-2-3', /not a port number/],
    [' 80', /not a port number/],
    ['+80', /not a port number/],
  ];
  for (const [value, reason] of malformed) {
    t.match(failure([`--to-ports=${value}`]), reason, JSON.stringify(value));
  }
});

t.test('names for --table and --masq-chain', async (t) => {
  const longest = 'a' + 'b'.repeat(63);
  for (const flag of ['table', 'masq-chain']) {
    for (const good of ['a', 'IP-MASQ-AGENT', 'ipmasq_2', longest]) {
      const parsed = options([`--${flag}=${good}`]);
      t.equal(flag === 'table' ? parsed.table : parsed.masqChain, good, `${flag} ${good}`);
    }
    for (const bad of ['', '1abc', '-x', '_x', 'a b', 'a.b', 'ä', longest + 'c', 'a;b', 'a}']) {
      t.match(failure([`--${flag}=${bad}`]), new RegExp(`--${flag}: .* is not a valid name`), bad);
    }
  }
});

t.test('nft keywords are refused as --table and --masq-chain names (exit 2)', async (t) => {
  for (const flag of ['table', 'masq-chain']) {
    for (const keyword of [
      'ip',
      'inet',
      'table',
      'add',
      'counter',
      'return',
      'jump',
      'accept',
      'masquerade',
      'typeof',
      'meta',
    ]) {
      t.match(
        failure([`--${flag}=${keyword}`]),
        new RegExp(`--${flag}: "${keyword}" is an nftables keyword`),
        keyword,
      );
    }
    // Words nft takes as names: iptables-nft's own tables are called nat and filter.
    for (const name of ['nat', 'filter', 'version', 'value', 'IP']) {
      const parsed = options([`--${flag}=${name}`]);
      t.equal(flag === 'table' ? parsed.table : parsed.masqChain, name, `${flag} ${name}`);
    }
  }
  for (const base of ['postrouting', 'prerouting']) {
    t.match(
      failure([`--masq-chain=${base}`]),
      new RegExp(`--masq-chain: "${base}" is the name of one of the agent's base chains`),
    );
  }
});

t.test('--listen', async (t) => {
  const good: [string, { host: string; port: number }][] = [
    ['0.0.0.0:9410', { host: '0.0.0.0', port: 9410 }],
    ['127.0.0.1:0', { host: '127.0.0.1', port: 0 }],
    ['[::]:9410', { host: '::', port: 9410 }],
    ['[::1]:9410', { host: '::1', port: 9410 }],
    ['localhost:8080', { host: 'localhost', port: 8080 }],
    [':9410', { host: '0.0.0.0', port: 9410 }],
  ];
  for (const [value, expected] of good) t.same(options([`--listen=${value}`]).listen, expected);
  const bad = [
    '9410',
    '0.0.0.0',
    '0.0.0.0:',
    '0.0.0.0:65536',
    '0.0.0.0:http',
    '::1:9410',
    '[::1]',
    '[::1]9410',
    '[1.2.3.4]:80',
    '[nonsense]:80',
    '999.1.1.1:80',
    'bad_host:80',
    '',
  ];
  for (const value of bad) t.match(failure([`--listen=${value}`]), /--listen /, value);
});

t.test('--set-layout', async (t) => {
  t.equal(options([]).setLayout, 'auto', 'auto by default');
  t.equal(options(['--set-layout', 'concat']).setLayout, 'concat');
  t.equal(options(['-set-layout=interval']).setLayout, 'interval');
  t.equal(options(['--set-layout=auto']).setLayout, 'auto');
  for (const bad of ['', 'Concat', 'hash', 'interval,concat']) {
    t.match(
      failure([`--set-layout=${bad}`]),
      /--set-layout: .* is not one of auto, interval, concat/,
    );
  }
});

t.test('--explain, --diff, --check, --output, --live', async (t) => {
  t.match(options(['--explain', '10.0.0.1', '::1', '--config', '/c', '198.19.0.4']), {
    mode: 'explain',
    explain: ['10.0.0.1', '::1', '198.19.0.4'],
    config: '/c',
  });
  t.match(options(['--check', 'a.yaml', 'dir', '--output=json']), {
    mode: 'check',
    check: ['a.yaml', 'dir'],
    output: 'json',
  });
  t.match(options(['--diff', 'new.yaml']), { mode: 'diff', proposed: 'new.yaml' });
  t.match(options(['--explain=10.0.0.1', '--live']), { mode: 'explain', live: true });
  t.match(failure(['--live']), /--live goes with --explain/);
  t.match(failure(['--diff', 'a', '--check', 'b']), /--diff and --check cannot be used together/);
  t.match(failure(['--render', 'extra']), /unexpected argument "extra"/);
  t.match(failure(['--output=yaml']), /--output: "yaml" is not one of text, json/);
});

t.test('--conntrack-flush', async (t) => {
  t.equal(options([]).conntrackFlush, 'udp', 'udp by default');
  t.equal(options(['--conntrack-flush', 'all']).conntrackFlush, 'all');
  t.equal(options(['-conntrack-flush=none']).conntrackFlush, 'none');
  for (const bad of ['', 'UDP', 'tcp', 'udp,all']) {
    t.match(
      failure([`--conntrack-flush=${bad}`]),
      /--conntrack-flush: .* is not one of udp, all, none/,
    );
  }
});

t.test('--log-level', async (t) => {
  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const) {
    t.equal(options(['--log-level', level]).logLevel, level);
  }
  for (const bad of ['INFO', 'warning', 'verbose', '']) {
    t.match(failure([`--log-level=${bad}`]), /--log-level: .* is not one of/);
  }
});

t.test('errors exit 2 with a reason and the usage', async (t) => {
  const cases: [string[], RegExp][] = [
    [['--bogus'], /unknown flag: --bogus/],
    [['-bogus=1'], /unknown flag: -bogus/],
    [['--Config=/x'], /unknown flag: --Config/],
    [['--constructor'], /unknown flag/],
    [['--log-dir=/x'], /unknown flag: --log-dir/],
    [['positional'], /unexpected argument "positional"/],
    [['--once', 'extra'], /unexpected argument "extra"/],
    [['--', 'extra'], /unexpected argument "extra"/],
    [['-'], /unexpected argument "-"/],
    [['---config=/x'], /bad flag syntax/],
    [['--=x'], /bad flag syntax/],
    [['--config'], /--config needs a value/],
    [['--table'], /--table needs a value/],
    [['--to-ports'], /--to-ports needs a value/],
    [['--listen'], /--listen needs a value/],
    [['-log-level'], /--log-level needs a value/],
    [['--masq-chain', '--once'], /--masq-chain needs a value/],
    [['--config='], /--config: the path is empty/],
    [['--enable-ipv6=yes'], /--enable-ipv6: "yes" is not a boolean/],
    [['--random-fully='], /--random-fully: "" is not a boolean/],
  ];
  for (const [argv, reason] of cases) {
    const message = failure(argv);
    t.match(message, reason, argv.join(' '));
    t.ok(message.endsWith(usage), `${argv.join(' ')} includes the usage`);
  }
  t.ok(parseArgs(['--']).ok, 'a lone -- ends the flags');
  t.equal(failure(['--help']), usage, '--help prints the usage alone');
  t.equal(failure(['-h']), usage);
});

t.test('parsed options are frozen', async (t) => {
  const parsed = options(['--to-ports=1-2']);
  t.ok(Object.isFrozen(parsed));
  t.ok(Object.isFrozen(parsed.toPorts));
  t.ok(Object.isFrozen(parsed.listen));
});

t.test('one table gives the usage, the defaults and the parsing', async (t) => {
  const defaults = options([]) as unknown as Record<string, unknown>;
  const flat = usage.replace(/\s+/g, ' ');
  for (const flag of FLAGS) {
    t.match(usage, new RegExp(`^  --${flag.name}\\b`, 'm'), `--${flag.name} is in the usage`);
    if (flag.option)
      t.same(defaults[flag.option.key], flag.option.initial, `--${flag.name} default`);
    if (flag.shownDefault !== undefined) {
      t.ok(flat.includes(`(default ${flag.shownDefault})`), `--${flag.name} shows its default`);
    }
  }
  for (const line of usage.split('\n')) t.ok(line.length <= 102, `usage line fits: ${line}`);
});

t.test('--configmap and --config given', async (t) => {
  t.equal(options(['--config', '/c']).configGiven, true);
  t.equal(options([]).configGiven, false);
  t.same(options(['--check', 'a.yaml']).configMaps, ['kube-system/ip-masq-agent']);
  t.match(options(['--check', 'a.yaml', '--configmap', 'net/masq', '--configmap=other']), {
    configMaps: ['net/masq', 'other'],
    configMapsGiven: true,
    check: ['a.yaml'],
  });
  t.match(failure(['--configmap', 'x']), /--configmap goes with --check/);
  for (const bad of ['Bad/Name', 'a/b/c', '/x', 'x/', '']) {
    t.match(
      failure(['--check', 'a', `--configmap=${bad}`]),
      /--configmap: .* is not a ConfigMap name/,
    );
  }
});

t.test('--nat-stats-interval, --flows, --to and --from', async (t) => {
  const interval = (text: string) => {
    const r = parseArgs([`--nat-stats-interval=${text}`], {});
    return r.ok ? r.options.natStatsIntervalMs : r.message.split('\n')[0];
  };
  t.equal(interval('0'), 0, '0 turns it off');
  t.equal(interval('1m30s'), 90_000);
  t.match(interval('30'), /--nat-stats-interval: "30" has no unit/);
  t.match(interval('500ms'), /below 1s/);
  t.match(interval('-5s'), /below 1s|negative/);
  const flows = parseArgs(['--flows', '--from', '10.244.0.0/16', '--to', '198.51.100.7'], {});
  t.ok(flows.ok && flows.options.mode === 'flows');
  t.match(flows.ok ? flows.options : {}, { from: '10.244.0.0/16', to: '198.51.100.7' });
  const bad = (argv: string[]) => {
    const r = parseArgs(argv, {});
    return r.ok ? 'accepted' : r.message.split('\n')[0];
  };
  t.match(bad(['--to', '10.0.0.1']), /--to goes with --flows/);
  t.match(
    bad(['--explain', '10.0.0.1', '--from', '10.0.0.0/8']),
    /an address \(not 10\.0\.0\.0\/8\)/,
  );
  t.match(bad(['--flows', '--from', 'nope']), /--from:/);
  t.match(bad(['--flows', '--to', '10.0.0.1/8']), /--to: .*not aligned/);
  t.match(bad(['--from', '10.0.0.1']), /--from goes with --explain, --diff or --flows/);
});

t.test('--pod: NAMESPACE/NAME, with --explain and the API, instead of --from', async (t) => {
  const message = (args: string[]) => {
    const result = parseArgs(args, {});
    return result.ok ? '' : result.message.split('\n')[0];
  };
  const ok = parseArgs(
    ['--explain', '198.51.100.1', '--pod', 'shop/db-0', '--kubeconfig', 'k'],
    {},
  );
  t.equal(ok.ok && ok.options.pod, 'shop/db-0');
  t.match(
    message(['--explain', '1.2.3.4', '--pod', 'shop', '--kubeconfig', 'k']),
    /--pod: "shop" is not NAMESPACE\/NAME/,
  );
  t.match(
    message(['--explain', '1.2.3.4', '--pod', 'Shop/db', '--kubeconfig', 'k']),
    /is not NAMESPACE\/NAME/,
  );
  t.match(
    message(['--explain', '1.2.3.4', '--pod', 'shop/db']),
    /--pod reads the pod from the API server/,
  );
  t.match(
    message([
      '--explain',
      '1.2.3.4',
      '--pod',
      'shop/db',
      '--from',
      '10.0.0.1',
      '--kubeconfig',
      'k',
    ]),
    /--from and --pod do not go together/,
  );
  t.match(message(['--pod', 'shop/db', '--kubeconfig', 'k']), /--pod goes with --explain/);
  t.match(
    message(['--explain', '1.2.3.4', '--pod-labels', 'app=db']),
    /--pod-labels goes with --explain and --from/,
  );
});

#!/bin/sh
# Memcheck of the nftables_napi addon: run()/generationId() on success, syntax error, dry-run and
# JSON, then 100 rounds, inside a throwaway network namespace (unshare -n). The same script with
# the addon loaded but never called is the baseline: what it reports is node/V8, not the addon.
# Prints the addon's share: definite/indirect leaks and invalid accesses whose stack passes through
# nftables_napi.node or libnftables. Exit 1 when there is any. Needs root (unshare) and valgrind.
set -eu
cd "$(dirname "$0")/.."
out=${VALGRIND_OUT:-$(mktemp -d /tmp/ipmasq-valgrind.XXXXXX)}
addon="$PWD/build/Release/nftables_napi.node"
cat >"$out/exercise.cjs" <<'JS'
const addon = require(process.argv[2]);
const rounds = process.argv[3] === 'baseline' ? 0 : 100;
const table = 'add table ip vg\nadd set ip vg s { type ipv4_addr; flags interval; }\n' +
  'add element ip vg s { 10.0.0.0/8, 192.168.0.0/16 }\n';
(async () => {
  if (rounds === 0) return;
  await addon.run(table, false, false);
  await addon.run('add table ip vg { this is not nft', false, false).catch(() => {});
  await addon.run('add table ip vg2', true, false);
  await addon.run('list table ip vg', false, true);
  await addon.generationId();
  for (let i = 0; i < rounds; i++) {
    await addon.run(table, false, false);
    await addon.run('flush ruleset; bad syntax }', false, false).catch(() => {});
    await addon.run('list table ip vg', false, i % 2 === 0);
    await addon.generationId();
  }
  await addon.run('delete table ip vg', false, false);
})().catch((err) => { console.error(err); process.exit(1); });
JS
for mode in baseline addon; do
  unshare -n valgrind --leak-check=full --show-leak-kinds=definite,indirect --num-callers=40 \
    --log-file="$out/$mode.log" node "$out/exercise.cjs" "$addon" "$mode"
done
# One valgrind record per blank-line-separated block (the ==PID== prefix removed first).
records() {
  sed 's/^==[0-9]*== \{0,1\}//' "$1" | awk -v RS='' -v want="$2" '$0 ~ want && /nftables_napi|libnftables/'
}
for mode in baseline addon; do
  echo "== $mode: $(grep -E 'ERROR SUMMARY|definitely lost:|indirectly lost:' "$out/$mode.log" | sed 's/^==[0-9]*== *//' | tr '\n' ' ')"
done
# libmnl/libnftnl send netlink messages with uninitialised struct padding: known, harmless, counted.
padding=$(grep -cE 'Syscall param (socketcall\.sendto|sendmsg).* points to uninitialised' "$out/addon.log" || true)
echo "== uninitialised padding in libnftables' netlink sends (known, not the addon's): $padding contexts"
found=$(records "$out/addon.log" '(definitely|indirectly) lost in|Invalid (read|write|free)|Mismatched|Conditional jump')
if [ -n "$found" ]; then
  echo "== leaks or invalid accesses through the addon or libnftables:"
  echo "$found"
  exit 1
fi
echo "== no leak or invalid access through nftables_napi.node or libnftables (logs in $out)"

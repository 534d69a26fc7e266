#!/usr/bin/env bash
# Runs test files on an arm64 kernel: an aarch64 guest under qemu-system-aarch64 (TCG, no KVM
# needed), booted from Debian 13's linux-image-arm64 with a root made from the Dockerfile's unit
# stage for arm64 (node, the addon built for aarch64 against libnftables 1.1.3, the tests) plus the
# kernel and the tools the tests call (nft, conntrack, ip, iptables, sysctl). The guest runs the
# files one by one, each alone under node and tsx with TAP_TIMEOUT=0, until a time budget is spent,
# then powers off; one line per file is printed here, the TAP output of each is left in OUT. As
# root.
#
#   scripts/arm64-guest.sh [--tests "test/kernel/*.test.ts test/e2e/*.test.ts"] [--budget 14400]
#                          [--out out/arm64-guest] [--smp N] [--memory MiB]
#
# Needs podman, qemu-user-static (for the image's build), qemu-system-arm (apt-get install -y
# qemu-system-arm) and e2fsprogs, and the arm64 stand-in for the base image, as scripts/image.sh
# does (docs/images.md, "Images"). Emulated, the guest runs many times slower than the host
# (docs/images.md says how much): a test that bounds a wait by the clock may fail for that alone.
set -uo pipefail
cd "$(dirname "$0")/.."

tests="test/kernel/*.test.ts test/e2e/*.test.ts"
budget=14400
out=out/arm64-guest
smp=$(nproc)
memory=6144
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "arm64-guest.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" = 0 ] || { echo 'arm64-guest.sh: run as root' >&2; exit 2; }
for tool in podman qemu-system-aarch64 mkfs.ext4 debugfs; do
  command -v "$tool" >/dev/null || { echo "arm64-guest.sh: $tool is missing" >&2; exit 2; }
done
if [ -z "${CONTAINERS_CONF:-}" ] && [ -f /var/cache/node-base/trixie/containers.conf ]; then
  export CONTAINERS_CONF=/var/cache/node-base/trixie/containers.conf
fi

# The files, expanded here: the guest gets a plain list.
files=$(for f in $tests; do [ -f "$f" ] && echo "$f"; done)
[ -n "$files" ] || { echo "arm64-guest.sh: no test file in: $tests" >&2; exit 2; }

rm -rf "$out" && mkdir -p "$out"
log="$out/build.log"
work=$(mktemp -d /var/tmp/ipmasq-arm64-guest.XXXXXX)
container=ipmasq-arm64-guest-$$
cleanup() {
  podman rm -f "$container" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

step() { echo "---- $* ($(date -u +%T))"; }

# The unit stage, given only a file it skips everywhere: built, no unit file run.
step 'the unit stage for arm64'
podman build --arch arm64 --network host -f deploy/Dockerfile --target unit \
  --build-arg UNIT_TESTS=test/unit/repo/deploy.test.ts \
  -t ipmasq-agent:guest-arm64 . >>"$log" 2>&1 || { echo "the build failed (see $log)"; exit 1; }

step 'the kernel and the tools, installed under qemu-user'
podman run --name "$container" --arch arm64 --network host ipmasq-agent:guest-arm64 sh -c '
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq &&
  apt-get install -y -qq --no-install-recommends linux-image-arm64 initramfs-tools \
    nftables conntrack iptables iproute2 procps kmod' >>"$log" 2>&1 ||
  { echo "the install failed (see $log)"; exit 1; }

step 'the root file system'
root=$work/root
mkdir -p "$root"
podman export "$container" | tar -x -C "$root" || exit 1
cp "$root"/boot/vmlinuz-* "$work/vmlinuz" && cp "$root"/boot/initrd.img-* "$work/initrd" || exit 1
echo "$files" >"$root/app/guest-tests.txt"
echo "$budget" >"$root/app/guest-budget.txt"
# PID 1 of the guest: mounts what the tests need, runs the files, records, powers off.
cat >"$root/sbin/ipmasq-guest-init" <<'EOF'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
m() { mountpoint -q "$2" || mount -t "$1" "$1" "$2"; }
m proc /proc; m sysfs /sys; m devtmpfs /dev; mkdir -p /dev/pts /dev/shm; m devpts /dev/pts
m tmpfs /run; m tmpfs /tmp; m tmpfs /dev/shm
mount -o remount,rw /
ip link set lo up
mkdir -p /results
say() { echo "$*"; echo "$*" >>/results/summary.txt; }
say "guest: $(uname -srm); $(nft --version); node $(node --version); $(nproc) cpus; started $(date -u +%FT%TZ)"
deadline=$(($(date +%s) + $(cat /app/guest-budget.txt)))
cd /app
for f in $(cat /app/guest-tests.txt); do
  if [ "$(date +%s)" -ge "$deadline" ]; then say "skipped $f (budget spent)"; continue; fi
  start=$(date +%s)
  tap=/results/$(echo "$f" | tr / _).tap
  echo "start $f"
  TAP_TIMEOUT=0 timeout 3600 node --import=tsx "$f" >"$tap" 2>&1 &
  pid=$!
  # Each test's line on the console as it ends.
  tail -n +1 -f --pid=$pid "$tap" | grep --line-buffered -E '^ *(not )?ok [0-9]+ ' &
  wait $pid
  rc=$?
  wait
  say "$f rc=$rc ok=$(grep -cE '^ *ok [0-9]+ ' "$tap") not-ok=$(grep -cE '^ *not ok [0-9]+ ' "$tap") $(($(date +%s) - start)) s"
done
say "ended $(date -u +%FT%TZ)"
sync
echo o >/proc/sysrq-trigger
sleep 60
EOF
chmod +x "$root/sbin/ipmasq-guest-init"
size_mib=$(($(du -sm "$root" | cut -f1) + 3072))
truncate -s "${size_mib}M" "$work/root.img"
mkfs.ext4 -q -F -d "$root" "$work/root.img" >>"$log" 2>&1 || { echo "mkfs failed (see $log)"; exit 1; }
rm -rf "$root"

step "the guest: $(echo "$files" | wc -l) files, budget $budget s"
timeout $((budget + 3600)) qemu-system-aarch64 -M virt -cpu max -smp "$smp" -m "$memory" \
  -accel tcg,thread=multi -nographic -no-reboot -nic none \
  -kernel "$work/vmlinuz" -initrd "$work/initrd" \
  -append 'console=ttyAMA0 root=/dev/vda rw init=/sbin/ipmasq-guest-init panic=10' \
  -drive "file=$work/root.img,format=raw,if=virtio" >"$out/console.log" 2>&1
echo "qemu exit $?" >>"$out/console.log"

# The results, read from the guest's disk.
debugfs -R "rdump /results $out" "$work/root.img" >>"$log" 2>&1
summary=$out/results/summary.txt
[ -f "$summary" ] || { echo "the guest left no results (see $out/console.log)"; exit 1; }
cat "$summary"
grep -q '^ended ' "$summary" || { echo 'the guest did not finish'; exit 1; }
! grep -qE ' rc=[1-9]' "$summary"

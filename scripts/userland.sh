#!/usr/bin/env bash
# Runs the kernel and e2e suites inside another Debian userland (default: trixie, nftables 1.1.x), with
# the addon built there against that userland's libnftables, beside this host's nft for the
# cross-version tests. As root:
#
#   scripts/userland.sh [SUITE]          build or reuse the root, then run the suites in it
#   scripts/userland.sh --root [SUITE]   only build or reuse the root; print its path
#   IPMASQ_USERLAND_TESTS='test/e2e/x.test.ts' scripts/userland.sh   only those test files
#
# The root is cached in $IPMASQ_USERLAND_CACHE (default /var/cache/ipmasq-agent) and reused while its
# package list is unchanged; delete the folder to start over. Inside it the host's / is mounted
# read-only at /host, so `chroot /host nft` is the host's nft (IPMASQ_NFT_ROOTS=/host tells the tests).
# Everything this script mounts is unmounted when it ends, however it ends.
set -Eeuo pipefail

root_only=0
if [ "${1:-}" = --root ]; then
  root_only=1
  shift
fi
suite=${1:-trixie}
case "$suite" in trixie | forky | sid | bookworm) ;; *)
  echo "userland.sh: unknown suite '$suite'" >&2
  exit 2
  ;;
esac
[ "$(id -u)" = 0 ] || {
  echo 'userland.sh: needs root (debootstrap, chroot, network namespaces)' >&2
  exit 1
}

project=$(cd "$(dirname "$0")/.." && pwd)
cache=${IPMASQ_USERLAND_CACHE:-/var/cache/ipmasq-agent}
root=$cache/$suite
mirror=$(bash "$project/scripts/debian-mirror.sh")
# What the suites need in the userland: node and a compiler for the addon, nft and its library,
# ip and python3 for the topology, iptables-nft for the legacy-chain tests, sysctl from procps,
# libnetfilter-conntrack for the addon's conntrack flush and the conntrack tool the tests count with.
packages=(nodejs npm build-essential python3 iproute2 nftables libnftables-dev iptables procps
  libnetfilter-conntrack-dev conntrack ca-certificates)
stamp="$suite ${packages[*]}"

log() { echo "userland.sh: $*" >&2; }

if ! command -v debootstrap >/dev/null; then
  log 'installing debootstrap'
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

if [ "$(cat "$root/.ipmasq-userland" 2>/dev/null)" != "$stamp" ]; then
  if [ ! -x "$root/usr/bin/apt-get" ]; then
    log "debootstrap $suite into $root (about a minute)"
    rm -rf "$root.partial"
    mkdir -p "$cache"
    debootstrap --variant=minbase --include=ca-certificates "$suite" "$root.partial" ${mirror:+"$mirror"} \
      >"$cache/$suite-debootstrap.log" 2>&1 || {
      tail -20 "$cache/$suite-debootstrap.log" >&2
      exit 1
    }
    mv "$root.partial" "$root"
  fi
  log "installing ${packages[*]} in $suite"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  in_root apt-get update -qq
  in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${packages[@]}" >"$cache/$suite-apt.log" 2>&1 || {
    tail -20 "$cache/$suite-apt.log" >&2
    exit 1
  }
  in_root apt-get clean
  echo "$stamp" >"$root/.ipmasq-userland"
fi
if [ "$root_only" = 1 ]; then
  echo "$root"
  exit 0
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_at() { # mount_at TARGET ARGS…: mount and remember it for the cleanup
  local target=$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

# `ip netns exec` needs the root to be a mount point; the rest is what a process expects to find.
mountpoint -q "$root" || mount_at "$root" --bind "$root"
mount_at "$root/proc" -t proc proc
mount_at "$root/sys" --rbind /sys
mount_at "$root/dev" --rbind /dev
mount_at "$root/host" --bind -o ro /
mount -o remount,bind,ro "$root/host"

# A copy of the tracked sources (so the addon and dist/ built there never touch the host's), with
# the host's node_modules mounted in: the dependencies are the same JavaScript on either side.
work=$root/work/ipmasq-agent
rm -rf "$work"
mkdir -p "$work/node_modules"
git -C "$project" ls-files -z --cached --others --exclude-standard |
  (cd "$project" && xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$work"
mount_at "$work/node_modules" --bind "$project/node_modules"

libversion=$(in_root dpkg-query -W -f '${Version}' libnftables1)
log "$suite: node $(in_root node --version), libnftables $libversion; building the addon"
in_root sh -c 'cd /work/ipmasq-agent && npx --no-install node-gyp rebuild --nodedir=/usr >/tmp/gyp.log 2>&1 ||
  { tail -30 /tmp/gyp.log; exit 1; }'
in_root sh -c 'cd /work/ipmasq-agent && npx --no-install tsc -p tsconfig.build.json'

# IPMASQ_USERLAND_TESTS narrows the run to some test files (for a look at one failure). The tests
# against a real API server (those using harness/control-plane.ts) stay on the host: its control
# plane is built there, and what the agent does with the API does not depend on the nft userland.
default_tests=$(cd "$work" && ls test/kernel/*.test.ts && grep -L 'harness/control-plane.js' test/e2e/*.test.ts)
default_tests=$(echo $default_tests)
tests=${IPMASQ_USERLAND_TESTS:-$default_tests}
log "$suite: running $tests"
in_root env CI="${CI:-}" IPMASQ_NFT_ROOTS=/host IPMASQ_USERLAND="$suite" TESTS="$tests" \
  sh -c 'cd /work/ipmasq-agent && npx --no-install tap --disable-coverage $TESTS'

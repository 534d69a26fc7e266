#!/usr/bin/env bash
# Builds the agent's image for each architecture from deploy/Dockerfile with podman (a foreign one
# under qemu-user-static), joins them in the manifest list NAME:VERSION, and checks each: the ELF
# machine of its binaries, --version, --render (the same bytes on every architecture), the addon
# loading, the unit suite run on that architecture (the Dockerfile's unit stage), the SBOM and the
# OCI labels; the host's own architecture also writes its table in a throwaway network namespace and
# answers /healthz. One line per check ("ok" or "FAIL"); exits 1 when any failed. As root.
#
#   scripts/image.sh [--arch "amd64 arm64"] [--name ipmasq-agent] [--out out/image] [--no-unit]
#                    [--all-unit]
#
# Under emulation the unit files run many times slower (38 of them: 549 s on two cores); the two
# longest property tests (thousands of random cases each) are left out of an emulated architecture's
# run unless --all-unit is given.
# The base images (node:22-trixie{,-slim} for each architecture): amd64's are made here when missing
# (scripts/node-base.sh); an arm64 build needs them made for arm64 beforehand (docs/images.md,
# "Images").
set -uo pipefail
cd "$(dirname "$0")/.."

arches="amd64 arm64"
name=ipmasq-agent
out=out/image
unit=1
all_unit=0
# What an emulated architecture leaves out by default: the two longest property tests.
EMULATED_SKIP="cidr/index.property config/yaml.property"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arches=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-unit) unit=0; shift ;;
    --all-unit) all_unit=1; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" = 0 ] || { echo 'image.sh: run as root (podman, network namespaces)' >&2; exit 2; }
command -v podman >/dev/null || { echo 'image.sh: podman is missing: apt-get install -y podman buildah runc' >&2; exit 2; }
# The settings the base images' maker wrote (runtime, limits), unless the caller chose others.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  if [ -f /var/cache/node-base/trixie/containers.conf ] && podman image exists docker.io/library/node:22-trixie; then
    export CONTAINERS_CONF=/var/cache/node-base/trixie/containers.conf
  else
    CONTAINERS_CONF=$(bash scripts/node-base.sh) || exit 1
    export CONTAINERS_CONF
  fi
fi

version=$(node -p "require('./package.json').version")
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
source_url=$(git config --get remote.origin.url 2>/dev/null || echo unknown)
host_arch=$(case "$(uname -m)" in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) uname -m ;; esac)
mkdir -p "$out"
log="$out/build.log"
: >"$log"
failed=0

ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
# check DESCRIPTION COMMAND...: the command's success is the check's.
check() {
  local what=$1
  shift
  if "$@" >>"$log" 2>&1; then ok "$what"; else fail "$what (see $log)"; fi
}

# e_machine of an ELF file: 62 x86-64, 183 AArch64.
elf_machine() { od -An -t u2 -j 18 -N 2 "$1" | tr -d ' '; }
want_machine() { case "$1" in amd64) echo 62 ;; arm64) echo 183 ;; esac; }

for arch in $arches; do
  tag="$name:$version-$arch"
  dir="$out/$arch"
  rm -rf "$dir" && mkdir -p "$dir"
  started=$(date +%s)
  # podman 4.3's builder reuses a cached LABEL step whatever the build args, so the Dockerfile's own
  # labels keep the commit and time of the build that made the cache: the two that change at every
  # build are also given here, where they always apply.
  if ! podman build --arch "$arch" --network host -f deploy/Dockerfile \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    --build-arg CREATED="$created" --build-arg SOURCE="$source_url" \
    --label org.opencontainers.image.revision="$revision" \
    --label org.opencontainers.image.created="$created" \
    -t "$tag" . >>"$log" 2>&1; then
    fail "$arch: the image builds (see $log)"
    continue
  fi
  ok "$arch: the image builds ($(($(date +%s) - started)) s)"
  run() { podman run --rm --arch "$arch" "$@"; }

  # The binaries, copied out of a container that never starts.
  container=$(podman create --arch "$arch" "$tag")
  for file in /usr/local/bin/node /app/build/Release/nftables_napi.node /app/bin/ipmasq-launch; do
    podman cp "$container:$file" "$dir/$(basename "$file")" >>"$log" 2>&1
    machine=$(elf_machine "$dir/$(basename "$file")" 2>/dev/null || echo none)
    if [ "$machine" = "$(want_machine "$arch")" ]; then ok "$arch: $file is an $arch ELF file"
    else fail "$arch: $file is an $arch ELF file (e_machine $machine)"; fi
  done
  podman cp "$container:/app/sbom" "$dir/sbom" >>"$log" 2>&1
  podman rm "$container" >/dev/null

  got=$(run "$tag" --version 2>>"$log")
  if [ "$got" = "ipmasq-agent $version" ]; then ok "$arch: --version says ipmasq-agent $version"
  else fail "$arch: --version says \"$got\""; fi
  run "$tag" --render --enable-ipv6 >"$dir/render.nft" 2>>"$log"
  if grep -q '^table ip ipmasq' "$dir/render.nft"; then ok "$arch: --render prints the tables"
  else fail "$arch: --render prints the tables"; fi
  check "$arch: the addon loads (libnftables $(run --entrypoint node "$tag" -p "require('/app/build/Release/nftables_napi.node').libnftablesVersion" 2>/dev/null))" \
    run --entrypoint node "$tag" -e "require('/app/build/Release/nftables_napi.node')"
  if [ "$unit" = 1 ]; then
    started=$(date +%s)
    files="test/unit/*.test.ts test/unit/*/*.test.ts"
    if [ "$arch" != "$host_arch" ] && [ "$all_unit" = 0 ]; then
      files=$(for f in test/unit/*.test.ts test/unit/*/*.test.ts; do
        name=${f#test/unit/}
        case " $EMULATED_SKIP " in *" ${name%.test.ts} "*) ;; *) printf '%s ' "$f" ;; esac
      done)
    fi
    if podman build --arch "$arch" --network host -f deploy/Dockerfile --target unit \
      --build-arg UNIT_TESTS="$files" -t "$name:unit-$arch" . >"$dir/unit.log" 2>&1; then
      ok "$arch: the unit suite passes on $arch ($(grep -c '^ok test/' "$dir/unit.log") files, $(($(date +%s) - started)) s)"
    else
      fail "$arch: the unit suite passes on $arch (see $dir/unit.log)"
    fi
  fi

  # What is inside, and the labels.
  check "$arch: SBOM: the npm tree (CycloneDX)" node -e "
    const bom = JSON.parse(require('fs').readFileSync('$dir/sbom/npm.cdx.json', 'utf8'));
    if (bom.bomFormat !== 'CycloneDX' || !bom.components.some((c) => c.name === 'fastify')) process.exit(1);"
  check "$arch: SBOM: the Debian packages" grep -q "^libnftables1	" "$dir/sbom/debian-packages.tsv"
  labels=$(podman image inspect --format '{{ index .Labels "org.opencontainers.image.revision" }} {{ index .Labels "org.opencontainers.image.version" }} {{ index .Labels "org.opencontainers.image.licenses" }}' "$tag")
  if [ "$labels" = "$revision $version GPL-2.0-or-later" ]; then ok "$arch: OCI labels (revision, version, licenses)"
  else fail "$arch: OCI labels: $labels"; fi
  size=$(podman image inspect --format '{{.Size}}' "$tag")
  echo "$arch $size" >>"$out/sizes.txt"
  echo "     $arch: $((size / 1000000)) MB"

  # The host's own architecture: a table written in a throwaway namespace, /healthz answered.
  if [ "$arch" = "$host_arch" ]; then
    ns="ipmasq-image-$$"
    ip netns add "$ns" && ip -n "$ns" link set lo up
    cid=$(podman run -d --network "ns:/run/netns/$ns" --cap-drop ALL --cap-add NET_ADMIN \
      --read-only --read-only-tmpfs=false --security-opt no-new-privileges "$tag" \
      --listen=127.0.0.1:9410 2>>"$log")
    healthy=0
    for _ in $(seq 1 100); do
      if ip netns exec "$ns" node -e "fetch('http://127.0.0.1:9410/healthz').then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))" 2>/dev/null; then
        healthy=1
        break
      fi
      sleep 0.2
    done
    if [ "$healthy" = 1 ]; then ok "$arch: /healthz answers 200 in a throwaway namespace"
    else fail "$arch: /healthz answers 200 in a throwaway namespace"; fi
    # /healthz may answer before the first write is in: the table within 20 s.
    marked=0
    for _ in $(seq 1 100); do
      if ip netns exec "$ns" nft list table ip ipmasq 2>/dev/null | grep -q 'ipmasq-agent generation 1 config sha256:'; then
        marked=1
        break
      fi
      sleep 0.2
    done
    if [ "$marked" = 1 ]; then ok "$arch: the table is in the kernel, with its mark"
    else fail "$arch: the table is in the kernel, with its mark"; fi
    podman rm -f "$cid" >/dev/null 2>&1
    ip netns del "$ns"
  fi
done

# --render is the same on every architecture; the manifest list joins them.
set -- $arches
first=$1
shift
for arch in "$@"; do
  if cmp -s "$out/$first/render.nft" "$out/$arch/render.nft"; then ok "--render: $arch the same as $first"
  else fail "--render: $arch differs from $first"; fi
done
podman manifest rm "$name:$version" >/dev/null 2>&1
podman manifest create "$name:$version" >>"$log" 2>&1
for arch in $arches; do
  podman manifest add "$name:$version" "containers-storage:localhost/$name:$version-$arch" >>"$log" 2>&1
done
listed=$(podman manifest inspect "$name:$version" 2>>"$log" | node -e "
  let text = ''; process.stdin.on('data', (d) => (text += d)).on('end', () =>
    console.log(JSON.parse(text).manifests.map((m) => m.platform.architecture).sort().join(' ')));")
if [ "$listed" = "$(echo $arches | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')" ]; then ok "manifest list $name:$version: $listed"
else fail "manifest list $name:$version: \"$listed\""; fi

echo "$failed failed"
[ "$failed" = 0 ]

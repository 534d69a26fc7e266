#!/usr/bin/env bash
# A real Kubernetes node for the tests (docs/development.md, "A real node"):
#
#   scripts/node.sh build      builds kubelet, kube-proxy, kube-controller-manager, kube-scheduler
#                              (test/control-plane's module), containerd, ctr, its runc shim, runc,
#                              the CNI plugins bridge, host-local and loopback, and helm
#                              (test/node's module) once per machine; prints where they are
#   scripts/node.sh path       where they are (or will be) on this machine
#
# Built with the machine's Go into a cache outside the clone keyed by what they are built from:
# $IPMASQ_NODE_CACHE (default /var/cache/ipmasq-agent/node), beside the control plane's.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$PATH:/usr/local/go/bin
kube_module=$root/test/control-plane
node_module=$root/test/node
cache_root=${IPMASQ_NODE_CACHE:-/var/cache/ipmasq-agent/node}

die() {
  echo "node: $*" >&2
  exit 1
}

# The binaries, by the directory they go to: bin/ (kubelet, ...) and cni/ (the plugins kubelet's
# runtime finds by name).
KUBE_TOOLS=(kubelet kube-proxy kube-controller-manager kube-scheduler)
NODE_TOOLS=(containerd ctr containerd-shim-runc-v2 runc helm)
CNI_PLUGINS=(bridge host-local loopback)

bin_dir() {
  local key
  key=$(cat "$kube_module/go.mod" "$kube_module/go.sum" "$node_module/go.mod" "$node_module/go.sum" \
    <(go env GOVERSION) <(bash "$root/scripts/control-plane.sh" ldflags) "$0" |
    sha256sum | cut -c1-12)
  echo "$cache_root/$(bash "$root/scripts/control-plane.sh" version)-$key"
}

built() {
  local dir=$1 name
  for name in "${KUBE_TOOLS[@]}" "${NODE_TOOLS[@]}"; do [ -x "$dir/bin/$name" ] || return 1; done
  for name in "${CNI_PLUGINS[@]}"; do [ -x "$dir/cni/$name" ] || return 1; done
}

build() {
  command -v go >/dev/null || die "go is not installed (docs/development.md, \"A real node\")"
  local dir
  dir=$(bin_dir)
  mkdir -p "$cache_root"
  # One build at a time on a machine; a second caller waits for it and finds the binaries.
  exec 9>"$cache_root/.lock"
  flock 9
  if built "$dir"; then
    echo "$dir"
    return
  fi
  [ -f /usr/include/seccomp.h ] || die "libseccomp-dev is not installed (runc's seccomp needs it)"
  echo "node: building kubelet, containerd, runc, the CNI plugins and helm into $dir (once per machine)" >&2
  local started=$SECONDS tmp go_build
  tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  mkdir -p "$tmp/bin" "$tmp/cni"
  # The machine's own Go (no toolchain download); each module's go.sum pins every dependency.
  go_build() { GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath "$@"; }
  (
    cd "$kube_module"
    go_build -ldflags "$(bash "$root/scripts/control-plane.sh" ldflags)" -o "$tmp/bin/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
    cd "$node_module"
    # No btrfs snapshotter (its headers are not installed; the node's is overlayfs).
    go_build -tags no_btrfs -o "$tmp/bin/" github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/ctr \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 helm.sh/helm/v4/cmd/helm
    # runc with seccomp, as its own Makefile builds it (the DaemonSet asks for RuntimeDefault).
    CGO_ENABLED=1 go_build -tags seccomp -o "$tmp/bin/runc" github.com/opencontainers/runc
    go_build -o "$tmp/cni/" github.com/containernetworking/plugins/plugins/main/bridge \
      github.com/containernetworking/plugins/plugins/ipam/host-local \
      github.com/containernetworking/plugins/plugins/main/loopback
  ) >&2 || {
    rm -rf "$tmp"
    die "the build failed (output above)"
  }
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "node: built in $((SECONDS - started)) s" >&2
  echo "$dir"
}

case "${1:-}" in
build) build ;;
path) bin_dir ;;
*)
  echo "usage: $0 build | path" >&2
  exit 2
  ;;
esac

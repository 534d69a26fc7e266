#!/usr/bin/env bash
# A real Kubernetes node for the tests (docs/development.md, "A real node"):
#
#   scripts/node.sh build      builds kubelet, kube-proxy, kube-controller-manager, kube-scheduler
#                              (test/control-plane's module), containerd, ctr, its runc shim, runc,
#                              the CNI plugins bridge, host-local and loopback, and helm
#                              (test/node's module), and a Prometheus server with Kubernetes
#                              discovery (test/node/prometheus's module) once per machine; prints
#                              where they are
#   scripts/node.sh path       where they are (or will be) on this machine
#   scripts/node.sh up DIR     a one-node cluster in network namespaces of its own: the control
#                              plane (scripts/control-plane.sh) with kube-controller-manager and
#                              kube-scheduler; containerd, kubelet and kube-proxy (nftables mode);
#                              pods on a CNI bridge (10.244.0.0/24); a veth to a "remote"
#                              namespace; the sandbox image and the checkout's agent image
#                              (deploy/Dockerfile, built by scripts/image.sh) imported. Writes
#                              DIR/env (KUBECTL, HELM, PROMETHEUS, KUBECONFIG, NODE_NETNS,
#                              REMOTE_NETNS, the addresses) and DIR/admin.kubeconfig. With
#                              NODE_OWNER=PID, a watcher takes it down when that process ends
#   scripts/node.sh down DIR   stops it all and removes what it made (processes, mounts,
#                              namespaces, cgroups, DIR)
#
# Built with the machine's Go into a cache outside the clone keyed by what they are built from:
# $IPMASQ_NODE_CACHE (default /var/cache/ipmasq-agent/node), beside the control plane's.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$PATH:/usr/local/go/bin
kube_module=$root/test/control-plane
node_module=$root/test/node
prometheus_module=$root/test/node/prometheus
cache_root=${IPMASQ_NODE_CACHE:-/var/cache/ipmasq-agent/node}

die() {
  echo "node: $*" >&2
  exit 1
}

# The binaries, by the directory they go to: bin/ (kubelet, ...) and cni/ (the plugins kubelet's
# runtime finds by name).
KUBE_TOOLS=(kubelet kube-proxy kube-controller-manager kube-scheduler)
NODE_TOOLS=(containerd ctr containerd-shim-runc-v2 runc helm prometheus)
CNI_PLUGINS=(bridge host-local loopback)

bin_dir() {
  local key
  key=$(cat "$kube_module/go.mod" "$kube_module/go.sum" "$node_module/go.mod" "$node_module/go.sum" \
    "$prometheus_module/go.mod" "$prometheus_module/go.sum" \
    <(go env GOVERSION) <(bash "$root/scripts/control-plane.sh" ldflags) <(declare -f build) |
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
  echo "node: building kubelet, containerd, runc, the CNI plugins, helm and prometheus into $dir (once per machine)" >&2
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
    # Debian's Prometheus is built without Kubernetes discovery: this one has it and no other.
    cd "$prometheus_module"
    go_build -tags remove_all_sd,enable_kubernetes_sd -o "$tmp/bin/prometheus" \
      github.com/prometheus/prometheus/cmd/prometheus
  ) >&2 || {
    rm -rf "$tmp"
    die "the build failed (output above)"
  }
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "node: built in $((SECONDS - started)) s" >&2
  echo "$dir"
}

# The node's addresses: the node 192.168.77.1 on a veth to the remote, which also holds 198.18.0.2
# (a benchmarking address: masqueraded by the shipped config, where 192.168/16 is not).
NODE_IP=192.168.77.1
REMOTE_IP=192.168.77.2
REMOTE_MASQ_IP=198.18.0.2
POD_CIDR=10.244.0.0/24
NODE_NAME=node-a
# The cgroup controllers kubelet's cgroupfs driver uses on this cgroup v1 machine.
CGROUP_CONTROLLERS=(blkio cpu cpuacct cpuset devices freezer memory pids systemd)

wait_until() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# image TAG STAGE OUT ENTRYPOINT...: a one-layer docker archive of the directory STAGE, for
# `ctr images import` (no registry, and no image builder on the node's side).
image() {
  local tag=$1 stage=$2 out=$3 work diff entry
  shift 3
  work=$(mktemp -d)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf "$work/layer.tar" .
  diff=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  entry=$(printf '"%s",' "$@")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":[%s],"Env":["PATH=/usr/local/bin:/usr/bin:/bin","NODE_ENV=production"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "${entry%,}" "$diff" >"$work/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$tag" >"$work/manifest.json"
  tar --owner=0 --group=0 --mtime=@0 -C "$work" -cf "$out" manifest.json config.json layer.tar
  rm -rf "$work"
}

# The checkout's agent image, as users build it: deploy/Dockerfile by scripts/image.sh (amd64, with
# its checks but not the unit stage; the base images made here by scripts/node-base.sh), saved
# under the name the manifests use (ipmasq-agent:VERSION) as an archive OUT for `ctr images import`.
# The image it replaces is removed (podman keeps the build's layers for the next).
agent_image() {
  local out=$1 log=$2 version tag old
  version=$(node -p "require('$root/package.json').version")
  tag=docker.io/library/ipmasq-agent:$version
  CONTAINERS_CONF=$(bash "$root/scripts/node-base.sh") || die "no base images for the agent's image"
  export CONTAINERS_CONF
  old=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  bash "$root/scripts/image.sh" --arch amd64 --no-unit --out "$(dirname "$out")/image-build" >"$log" 2>&1 ||
    die "the agent's image did not build or pass its checks: $(grep FAIL "$log" | head -5) (see $log)"
  podman tag "ipmasq-agent:$version-amd64" "$tag"
  podman save --format docker-archive -o "$out" "$tag" >/dev/null 2>&1 || die "podman save $tag failed"
  if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
    podman rmi "$old" >/dev/null 2>&1 || true
  fi
}

node_id() { echo -n "$1" | sha256sum | cut -c1-8; }

up() {
  local dir bin kube id node remote
  dir=$(mkdir -p "$1" && cd "$1" && pwd)
  bin=$(build)
  kube=$(bash "$root/scripts/control-plane.sh" build)
  id=$(node_id "$dir")
  node=ipmasq-node-$id
  remote=ipmasq-remote-$id
  # Whatever failed on the way leaves nothing behind.
  trap "down '$dir'" EXIT
  cat >"$dir/env" <<EOF
NODE_BIN=$bin
KUBECTL=$kube/kubectl
HELM=$bin/bin/helm
PROMETHEUS=$bin/bin/prometheus
KUBECONFIG=$dir/admin.kubeconfig
NODE_NETNS=$node
REMOTE_NETNS=$remote
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
REMOTE_IP=$REMOTE_IP
REMOTE_MASQ_IP=$REMOTE_MASQ_IP
POD_CIDR=$POD_CIDR
CONTAINERD_ADDRESS=$dir/containerd.sock
POD_LOGS=$dir/pod-logs
EOF
  ls /run/netns 2>/dev/null | grep '^cni-' >"$dir/netns-before" || true

  ip netns add "$node"
  ip netns add "$remote"
  ip -n "$node" link set lo up
  ip -n "$remote" link set lo up
  ip link add "in-$id" type veth peer name "ir-$id"
  ip link set "in-$id" netns "$node"
  ip link set "ir-$id" netns "$remote"
  ip -n "$node" addr add "$NODE_IP/24" dev "in-$id"
  ip -n "$remote" addr add "$REMOTE_IP/24" dev "ir-$id"
  ip -n "$remote" addr add "$REMOTE_MASQ_IP/32" dev "ir-$id"
  ip -n "$node" link set "in-$id" up
  ip -n "$remote" link set "ir-$id" up
  ip -n "$node" route add default via "$REMOTE_IP"
  ip -n "$remote" route add "$POD_CIDR" via "$NODE_IP"
  ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1

  # The control plane on the node's loopback, with the controllers a DaemonSet needs.
  ip netns exec "$node" env CONTROL_PLANE_ADVERTISE="$NODE_IP" \
    bash "$root/scripts/control-plane.sh" up "$dir/cp" >/dev/null
  cp "$dir/cp/admin.kubeconfig" "$dir/admin.kubeconfig"
  ip netns exec "$node" "$bin/bin/kube-controller-manager" --kubeconfig "$dir/admin.kubeconfig" \
    --service-account-private-key-file "$dir/cp/pki/sa.key" --root-ca-file "$dir/cp/pki/ca.crt" \
    --leader-elect=false --bind-address 127.0.0.1 --controllers '*,-nodeipam' --v 1 \
    >"$dir/controller-manager.log" 2>&1 &
  echo $! >"$dir/controller-manager.pid"
  ip netns exec "$node" "$bin/bin/kube-scheduler" --kubeconfig "$dir/admin.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --v 1 >"$dir/scheduler.log" 2>&1 &
  echo $! >"$dir/scheduler.pid"

  # kubelet's cgroupfs driver wants its root in every controller (cpuset's with CPUs and nodes).
  local c
  for c in "${CGROUP_CONTROLLERS[@]}"; do mkdir -p "/sys/fs/cgroup/$c/ipmasq-node-$id"; done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/ipmasq-node-$id/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/ipmasq-node-$id/cpuset.mems"

  mkdir -p "$dir/cni/net.d" "$dir/containerd" "$dir/kubelet/manifests" "$dir/images"
  cat >"$dir/cni/net.d/10-pods.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni/ipam"}},
  {"type": "loopback"}]}
EOF
  # restrict_oom_score_adj: this machine holds no CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj below containerd's own, as runc would for the sandbox (-998) and critical pods.
  cat >"$dir/containerd/config.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$bin/cni"]
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$bin/bin/runc"
        Root = "$dir/runc"
        SystemdCgroup = false
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "registry.k8s.io/pause:3.10"
EOF
  # Into the node's network namespace alone: `ip netns exec` would mount a sysfs of its own over
  # /sys and hide the cgroup controllers from kubelet and runc.
  nsenter --net="/run/netns/$node" env PATH="$bin/bin:$PATH" "$bin/bin/containerd" \
    --config "$dir/containerd/config.toml" >"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  wait_until 60 "$bin/bin/ctr" --address "$dir/containerd.sock" version ||
    die "containerd did not answer within 60 s: $(tail -5 "$dir/containerd.log")"

  # The images, from this machine: the sandbox, and the checkout's agent (deploy/Dockerfile).
  mkdir -p "$dir/images/pause-root"
  cc -O2 -static -o "$dir/images/pause-root/pause" "$root/test/node/pause.c"
  image registry.k8s.io/pause:3.10 "$dir/images/pause-root" "$dir/images/pause.tar" /pause
  agent_image "$dir/images/agent.tar" "$dir/image.log"
  local archive
  for archive in pause agent; do
    "$bin/bin/ctr" --address "$dir/containerd.sock" -n k8s.io images import \
      "$dir/images/$archive.tar" >/dev/null 2>&1 || die "could not import the $archive image"
  done
  rm -rf "$dir/images"

  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /ipmasq-node-$id
containerRuntimeEndpoint: unix://$dir/containerd.sock
staticPodPath: $dir/kubelet/manifests
podLogsDir: $dir/pod-logs
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
failSwapOn: false
resolvConf: ""
podCIDR: $POD_CIDR
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
evictionHard: {memory.available: "1Mi", nodefs.available: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 5s
fileCheckFrequency: 2s
EOF
  nsenter --net="/run/netns/$node" "$bin/bin/kubelet" --config "$dir/kubelet/config.yaml" \
    --kubeconfig "$dir/admin.kubeconfig" --root-dir "$dir/kubelet/root" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1 >"$dir/kubelet.log" 2>&1 &
  echo $! >"$dir/kubelet.pid"
  # kube-proxy in nftables mode, as on a node of today: the `kubernetes` Service (10.96.0.1) for
  # the pods, the agent's API client among them, and a busy neighbour in the same namespace.
  # Conntrack's limits are the machine's (only the first namespace may set them).
  nsenter --net="/run/netns/$node" "$bin/bin/kube-proxy" --proxy-mode nftables \
    --kubeconfig "$dir/admin.kubeconfig" --hostname-override "$NODE_NAME" \
    --cluster-cidr 10.244.0.0/16 --conntrack-max-per-core 0 --conntrack-min 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256 --v 1 \
    >"$dir/kube-proxy.log" 2>&1 &
  echo $! >"$dir/kube-proxy.pid"
  local kubectl=("$kube/kubectl" --kubeconfig "$dir/admin.kubeconfig")
  wait_until 120 ip netns exec "$node" "${kubectl[@]}" wait "node/$NODE_NAME" \
    --for=condition=Ready --timeout=5s ||
    die "the node was not Ready within 120 s: $(grep '^E' "$dir/kubelet.log" | tail -5)"
  wait_until 60 ip netns exec "$node" "${kubectl[@]}" get serviceaccount default ||
    die "no default ServiceAccount within 60 s: $(tail -5 "$dir/controller-manager.log")"
  trap - EXIT
  # A test process that dies without its teardown leaves nothing running: NODE_OWNER names the
  # process whose end takes the node down.
  if [ -n "${NODE_OWNER:-}" ]; then
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" down "$3"' \
      watcher "$NODE_OWNER" "$0" "$dir" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watcher.pid"
  fi
  echo "$dir/env"
}

# Stops the process in a pid file: SIGTERM, up to $2 seconds (default 5), then SIGKILL.
stop() {
  local pidfile=$1 grace=${2:-5} pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq $((grace * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

down() {
  local dir=$1 id bin
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  id=$(node_id "$dir")
  bin=$(sed -n 's/^NODE_BIN=//p' "$dir/env" 2>/dev/null || true)
  stop "$dir/kubelet.pid" 10
  stop "$dir/kube-proxy.pid"
  # Every container of the node, by runc itself (its state is under DIR), then the shims.
  local runc=${bin:-/nonexistent}/bin/runc container
  if [ -x "$runc" ] && [ -d "$dir/runc/k8s.io" ]; then
    for container in $("$runc" --root "$dir/runc/k8s.io" list -q 2>/dev/null); do
      "$runc" --root "$dir/runc/k8s.io" kill "$container" KILL 2>/dev/null || true
      "$runc" --root "$dir/runc/k8s.io" delete -f "$container" 2>/dev/null || true
    done
  fi
  pkill -9 -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null || true
  stop "$dir/containerd.pid" 10
  stop "$dir/controller-manager.pid"
  stop "$dir/scheduler.pid"
  if [ -d "$dir/cp" ]; then bash "$root/scripts/control-plane.sh" down "$dir/cp" || true; fi
  # Mounts under DIR (the overlays, the volumes, the sandboxes' shm), deepest first.
  local target
  for target in $(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount -l "$target" 2>/dev/null || true
  done
  # The pods' namespaces the CNI made while the node ran.
  local ns
  for ns in $(ls /run/netns 2>/dev/null | grep '^cni-' || true); do
    grep -qx "$ns" "$dir/netns-before" 2>/dev/null && continue
    ip netns delete "$ns" 2>/dev/null || true
  done
  local c
  for c in "${CGROUP_CONTROLLERS[@]}"; do
    [ -d "/sys/fs/cgroup/$c/ipmasq-node-$id" ] || continue
    find "/sys/fs/cgroup/$c/ipmasq-node-$id" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip netns delete "ipmasq-node-$id" 2>/dev/null || true
  ip netns delete "ipmasq-remote-$id" 2>/dev/null || true
  local watcher
  watcher=$(cat "$dir/watcher.pid" 2>/dev/null || true)
  if [ -n "$watcher" ] && [ "$watcher" != $$ ] && [ "$watcher" != "$PPID" ]; then
    stop "$dir/watcher.pid" 0
  fi
  rm -rf "$dir"
}

case "${1:-}" in
build)
  build
  # The agent image's base images (the image itself is built at each `up`, from the checkout).
  bash "$root/scripts/node-base.sh" >/dev/null
  ;;
path) bin_dir ;;
up) up "${2:?usage: $0 up DIR}" ;;
down) down "${2:?usage: $0 down DIR}" ;;
*)
  echo "usage: $0 build | path | up DIR | down DIR" >&2
  exit 2
  ;;
esac

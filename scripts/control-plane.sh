#!/usr/bin/env bash
# A real Kubernetes control plane for the tests (docs/development.md, "Tests against a real API
# server"):
#
#   scripts/control-plane.sh build        builds kube-apiserver, kubectl and etcd (and the bench's
#                                         client-go reference, listwatch) once per machine
#   scripts/control-plane.sh path         where they are (or will be) on this machine
#   scripts/control-plane.sh certs DIR    makes the CA, certificates and DIR/admin.kubeconfig only
#   scripts/control-plane.sh up DIR       starts etcd and kube-apiserver on this namespace's
#                                         loopback, writes DIR/admin.kubeconfig (and DIR/env: the
#                                         binaries' paths)
#   scripts/control-plane.sh restart-apiserver DIR   stops kube-apiserver and starts it again
#   scripts/control-plane.sh compact      compacts etcd's history to its current revision
#   scripts/control-plane.sh down DIR     stops them and removes what they wrote
#   scripts/control-plane.sh version | ldflags   the Kubernetes version and the build's -ldflags
#                                         (scripts/node.sh builds the node's from the same module)
#
# The binaries come from test/control-plane/go.mod (k8s.io/kubernetes with its staging modules
# replaced by their published v0.x versions, and go.etcd.io/etcd/server/v3), built with the
# machine's Go into a cache outside the clone keyed by what they are built from:
# $IPMASQ_CONTROL_PLANE_CACHE (default /var/cache/ipmasq-agent/control-plane). Ports: 2379 and 2380
# (etcd), 6443 (kube-apiserver), all on 127.0.0.1; the tests run each in a namespace of their own
# (ip netns exec NS scripts/control-plane.sh up DIR), whose loopback no one else uses.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# Go's own tarball installs there, and not every shell has it on its PATH.
PATH=$PATH:/usr/local/go/bin
module=$root/test/control-plane
cache_root=${IPMASQ_CONTROL_PLANE_CACHE:-/var/cache/ipmasq-agent/control-plane}
etcd_port=${CONTROL_PLANE_ETCD_PORT:-2379}
peer_port=${CONTROL_PLANE_PEER_PORT:-2380}
api_port=${CONTROL_PLANE_API_PORT:-6443}
# The address kube-apiserver advertises (the `kubernetes` Service's endpoint): loopback unless a
# node needs it reachable (scripts/node.sh: its node address, served on every address).
advertise=${CONTROL_PLANE_ADVERTISE:-127.0.0.1}

die() {
  echo "control-plane: $*" >&2
  exit 1
}

version_of() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$module/go.mod"; }

# The version the Kubernetes binaries report (kubectl version refuses to parse an unset one), set
# where Kubernetes' own build sets it.
ldflags() {
  local kube=$1 minor
  minor=$(echo "$kube" | cut -d. -f2)
  local flags='' pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

# Where this machine keeps the binaries built from the module as it is now.
bin_dir() {
  local kube etcd key
  kube=$(version_of k8s.io/kubernetes)
  etcd=$(version_of go.etcd.io/etcd/server/v3)
  [ -n "$kube" ] && [ -n "$etcd" ] || die "test/control-plane/go.mod names no kubernetes or etcd version"
  key=$(cat "$module/go.mod" "$module/go.sum" "$module"/cmd/*/*.go <(go env GOVERSION) \
    <(ldflags "$kube") | sha256sum | cut -c1-12)
  echo "$cache_root/kubernetes-$kube-etcd-$etcd-$key"
}

build() {
  command -v go >/dev/null || die "go is not installed (README, \"Tests against a real API server\")"
  local dir
  dir=$(bin_dir)
  mkdir -p "$cache_root"
  # One build at a time on a machine; a second caller waits for it and finds the binaries.
  exec 9>"$cache_root/.lock"
  flock 9
  if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kubectl" ] && [ -x "$dir/etcd" ] &&
    [ -x "$dir/listwatch" ]; then
    echo "$dir"
    return
  fi
  echo "control-plane: building kube-apiserver, kubectl and etcd into $dir (once per machine)" >&2
  local started=$SECONDS tmp
  tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  # The machine's own Go (no toolchain download); the module's go.sum pins every dependency.
  (
    cd "$module"
    GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
      -ldflags "$(ldflags "$(version_of k8s.io/kubernetes)")" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
    GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    # The bench's reference client: client-go's informer on Nodes (cmd/listwatch).
    GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -o "$tmp/listwatch" ./cmd/listwatch
  ) >&2 || {
    rm -rf "$tmp"
    die "the build failed (output above)"
  }
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "control-plane: built in $((SECONDS - started)) s" >&2
  echo "$dir"
}

# Waits until a command succeeds, for at most $1 seconds.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# Whether a process lives (a zombie waiting for this machine's init to reap it does not).
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

running() { [ -f "$1" ] && alive "$(cat "$1")"; }

certificates() {
  local dir=$1 pki=$1/pki
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ipmasq-test-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    cat >serving.ext <<EOF
subjectAltName = IP:127.0.0.1, IP:$advertise, IP:10.96.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc
extendedKeyUsage = serverAuth
EOF
    openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key \
      -out apiserver.csr 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile serving.ext -out apiserver.crt 2>/dev/null
    printf 'extendedKeyUsage = clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -subj '/O=system:masters/CN=ipmasq-test-admin' \
      -keyout admin.key -out admin.csr 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  local b64='base64 -w0'
  cat >"$dir/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: https://127.0.0.1:$api_port
      certificate-authority-data: $($b64 "$pki/ca.crt")
users:
  - name: admin
    user:
      client-certificate-data: $($b64 "$pki/admin.crt")
      client-key-data: $($b64 "$pki/admin.key")
contexts:
  - name: test
    context:
      cluster: test
      user: admin
current-context: test
EOF
}

start_etcd() {
  local dir=$1 bin=$2
  "$bin/etcd" --name test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "test=http://127.0.0.1:$peer_port" \
    --log-level warn >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  wait_until 60 etcd curl -fsS "http://127.0.0.1:$etcd_port/health" ||
    die "etcd did not answer within 60 s: $(tail -5 "$dir/etcd.log")"
}

start_apiserver() {
  local dir=$1 bin=$2 pki=$1/pki
  "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$([ "$advertise" = 127.0.0.1 ] && echo 127.0.0.1 || echo 0.0.0.0)" \
    --advertise-address "$advertise" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --api-audiences https://kubernetes.default.svc \
    --authorization-mode RBAC \
    --service-cluster-ip-range 10.96.0.0/16 \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --profiling=false --v 1 >"$dir/apiserver.log" 2>&1 &
  echo $! >"$dir/apiserver.pid"
  wait_until 120 kube-apiserver curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
    --key "$pki/admin.key" "https://127.0.0.1:$api_port/readyz" ||
    die "kube-apiserver was not ready within 120 s: $(tail -5 "$dir/apiserver.log")"
}

# Stops the process in a pid file: SIGTERM and up to $2 seconds (default 0: SIGKILL at once).
stop() {
  local pidfile=$1 grace=${2:-0}
  running "$pidfile" || return 0
  local pid
  pid=$(cat "$pidfile")
  if [ "$grace" -gt 0 ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq $((grace * 10))); do
      alive "$pid" || return 0
      sleep 0.1
    done
  fi
  kill -9 "$pid" 2>/dev/null || true
  # Gone before its files are removed and its ports taken again.
  while alive "$pid"; do sleep 0.05; done
}

up() {
  local dir=$1 bin
  command -v openssl >/dev/null || die "openssl is not installed"
  bin=$(build)
  mkdir -p "$dir"
  # Whatever failed on the way leaves nothing running.
  trap 'down "$dir"' EXIT
  # Certificates made beforehand (`certs DIR`) are kept: a client may hold the kubeconfig already.
  [ -f "$dir/pki/ca.crt" ] || certificates "$dir"
  start_etcd "$dir" "$bin"
  start_apiserver "$dir" "$bin"
  trap - EXIT
  # A test process that dies without its teardown (killed on a timeout) leaves nothing running:
  # CONTROL_PLANE_OWNER names the process whose end takes the control plane down.
  if [ -n "${CONTROL_PLANE_OWNER:-}" ]; then
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" down "$3"' \
      watcher "$CONTROL_PLANE_OWNER" "$0" "$dir" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watcher.pid"
  fi
  cat >"$dir/env" <<EOF
CONTROL_PLANE_BIN=$bin
KUBECTL=$bin/kubectl
KUBECONFIG=$dir/admin.kubeconfig
EOF
  echo "$dir/admin.kubeconfig"
}

# kube-apiserver stopped and started again on the same etcd and certificates (a restart mid-watch).
restart_apiserver() {
  local dir=$1
  [ -f "$dir/env" ] || die "$dir has no control plane"
  stop "$dir/apiserver.pid" 5
  start_apiserver "$dir" "$(sed -n 's/^CONTROL_PLANE_BIN=//p' "$dir/env")"
}

# etcd's history compacted up to its current revision, through its JSON gateway: a watch or a
# continue token from before it is answered 410 Gone.
compact() {
  local url=http://127.0.0.1:$etcd_port revision
  revision=$(curl -fsS -X POST "$url/v3/kv/range" -d '{"key":"AA=="}' |
    sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
  [ -n "$revision" ] || die "etcd gave no revision"
  curl -fsS -X POST "$url/v3/kv/compaction" -d "{\"revision\":\"$revision\",\"physical\":true}" >/dev/null
  echo "$revision"
}

down() {
  local dir=$1
  [ -d "$dir" ] || return 0
  stop "$dir/apiserver.pid"
  stop "$dir/etcd.pid"
  # The watcher, unless it is what runs this (bash may exec its last command in place).
  local watcher
  watcher=$(cat "$dir/watcher.pid" 2>/dev/null || true)
  if [ -n "$watcher" ] && [ "$watcher" != $$ ] && [ "$watcher" != "$PPID" ]; then
    stop "$dir/watcher.pid"
  fi
  rm -rf "$dir/etcd" "$dir/pki" "$dir/admin.kubeconfig" "$dir/env" "$dir/etcd.pid" \
    "$dir/apiserver.pid" "$dir/watcher.pid" "$dir/etcd.log" "$dir/apiserver.log"
  rmdir "$dir" 2>/dev/null || true
}

case "${1:-}" in
build) build ;;
path) bin_dir ;;
# For scripts/node.sh, which builds the node's binaries from the same module.
version) version_of k8s.io/kubernetes ;;
ldflags) ldflags "$(version_of k8s.io/kubernetes)" ;;
certs) certificates "${2:?usage: $0 certs DIR}" ;;
up) up "${2:?usage: $0 up DIR}" ;;
restart-apiserver) restart_apiserver "${2:?usage: $0 restart-apiserver DIR}" ;;
compact) compact ;;
down) down "${2:?usage: $0 down DIR}" ;;
*)
  echo "usage: $0 build | path | certs DIR | up DIR | restart-apiserver DIR | compact | down DIR" >&2
  exit 2
  ;;
esac

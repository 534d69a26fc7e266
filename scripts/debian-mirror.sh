#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses (IPMASQ_DEBIAN_MIRROR overrides it), or nothing
# when none is found (then debootstrap takes its own). For the Debian roots the scripts make:
# scripts/userland.sh, scripts/node-base.sh.
set -euo pipefail
if [ -n "${IPMASQ_DEBIAN_MIRROR:-}" ]; then
  echo "$IPMASQ_DEBIAN_MIRROR"
  exit 0
fi
uri=$(grep -hm1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2; exit}' || true)
[ -n "$uri" ] || uri=$(grep -hm1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2; exit}' || true)
echo "$uri"

{
  "targets": [
    {
      "target_name": "nftables_napi",
      "sources": [
        "native/nftables_napi.cc",
        "native/runner.cc",
        "native/netlink.cc",
        "native/netlink-wire.cc",
        "native/netlink-batch.cc",
        "native/netlink-monitor.cc",
        "native/element-audit.cc",
        "native/conntrack.cc",
        "native/nat-stats.cc",
        "native/route.cc",
        "native/memory.cc",
        "native/later.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "libraries": ["-lnftables", "-lnetfilter_conntrack"],
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "LIBNFTABLES_VERSION=\"<!(node scripts/libnftables-version.mjs)\""
      ],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fexceptions"],
      "cflags_cc!": ["-fno-exceptions"]
    },
    {
      "target_name": "ipmasq-launch",
      "type": "executable",
      "sources": ["native/launch.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Werror"]
    }
  ]
}

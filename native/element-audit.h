// The audit of an element-only write (docs/writes.md, "The everyday edit"): a set's elements read
// back over netlink and compared with what the write meant, off the JS thread. What it meant comes
// as the agent's own prefixes in text, parsed here on their own rather than by the write's packing,
// so that a fault of that packing is caught too. Plain C++: nothing of N-API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "netlink.h"

namespace audit {

struct SetAudit {
  netlink::Status status;
  size_t held = 0;   // elements in the kernel
  size_t meant = 0;  // elements the write meant
  size_t missing_count = 0;
  size_t extra_count = 0;
  // The first few of each, as address ranges ("first-last"), for the log.
  std::vector<std::string> missing;
  std::vector<std::string> extra;
};

// `family` 4 or 6; `concat`: a set keyed `ADDR . meta l4proto` (each element's protocol range
// 0-255); else a plain interval set. `expected`: one prefix per line ("10.0.0.0/8", or an address).
SetAudit AuditSet(int family, const std::string& table, const std::string& set, bool concat,
                  const std::string& expected);

}  // namespace audit

// What the node's NAT does with the translated flows (README, "What the node's NAT does"): one
// dump of a family's conntrack entries that were source-translated, aggregated while it runs —
// flows by protocol, the busiest (translated address, destination, port) of each, and for
// `--flows` the flows by source and destination. Bounded in CPU time; holds no entry, only counts.
// Plain C++: nothing of N-API.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "conntrack.h"

namespace natstats {

using Address = std::array<uint8_t, 16>;  // network byte order; IPv4 uses the first 4 bytes

struct Request {
  uint8_t family = 0;                  // AF_INET or AF_INET6
  double cpu_budget_s = 5;             // the dump stops once its thread has used this much CPU
  bool by_source = false;              // keep the flows by source and destination (--flows)
  std::vector<conntrack::Range> from;  // only these original sources (empty: all)
  std::vector<conntrack::Range> to;    // only these destinations (empty: all)
};

// One protocol's translated flows and its busiest (translated address, destination, port).
struct Protocol {
  uint64_t flows = 0;
  uint64_t busiest = 0;
};

// The flows of one source to one destination, and where they were translated to.
struct Group {
  Address source{};
  uint8_t protocol = 0;
  Address destination{};
  uint16_t port = 0;  // host byte order
  uint64_t flows = 0;
  std::vector<Address> translated;  // distinct, at most kTranslatedKept
  // The most flows any of its translated addresses has to this destination and port.
  uint64_t busiest = 0;
};

constexpr size_t kTranslatedKept = 8;

struct Result {
  bool ok = true;
  std::string error;
  bool complete = true;  // false: stopped at the CPU budget
  uint64_t seen = 0;     // entries the dump delivered
  uint64_t translated = 0;
  double cpu_s = 0;
  std::map<uint8_t, Protocol> protocols;  // by protocol number
  std::vector<Group> groups;              // with by_source only
};

Result Sample(const Request& request);

}  // namespace natstats

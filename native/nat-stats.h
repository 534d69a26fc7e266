// What the node's NAT does with the translated flows (docs/observability.md, "What the node's NAT
// does"): one dump of a family's conntrack entries that were source-translated, aggregated while it
// runs — flows by protocol, the busiest (translated address, destination, port) of each, and for
// `--flows` the flows by source and destination (a compact record each, FlowRecords). Bounded in
// CPU time; holds no entry, only counts and those records.
// Plain C++: nothing of N-API.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "conntrack.h"

namespace natstats {

struct Request {
  uint8_t family = 0;                  // AF_INET or AF_INET6
  double cpu_budget_s = 5;             // the dump stops once its thread has used this much CPU
  bool by_source = false;              // keep the flows by source and destination (--flows)
  std::vector<conntrack::Range> from;  // only these original sources (sorted, disjoint; empty: all)
  std::vector<conntrack::Range> to;    // only these destinations (likewise)
};

// One protocol's translated flows and its busiest (translated address, destination, port).
struct Protocol {
  uint64_t flows = 0;
  uint64_t busiest = 0;
};

// --flows' records (docs/observability.md, "What the node's NAT does"): one per (source, translated
// address, destination, port, protocol), in memory mapped for the most there may be and taken page
// by page as they are written (no copy as they grow), sorted in place as they are shown: by their
// source's flows (most first), source, their group's flows (source, destination, port, protocol;
// most first), destination, port, protocol and translated address. Each record, with w the address
// width (4 or 16): source at 0, translated address at w, destination at 2w, port (network order) at
// 3w, protocol at 3w + 2, then 32-bit counts in host order: its flows at 3w + 4, and at 3w + 8 the
// busiest of its group's translated addresses to that destination and port (its flows there, from
// any source).
struct FlowRecords {
  uint8_t* data = nullptr;
  size_t mapped = 0;
  size_t count = 0;
  size_t stride = 0;
  FlowRecords() = default;
  FlowRecords(const FlowRecords&) = delete;
  FlowRecords& operator=(const FlowRecords&) = delete;
  ~FlowRecords();
};

// The most records one dump keeps (the dump stops there, incomplete).
constexpr size_t kFlowRecordsMax = size_t{1} << 24;

struct Result {
  bool ok = true;
  std::string error;
  bool complete = true;  // false: stopped at the CPU budget (or at kFlowRecordsMax records)
  uint64_t seen = 0;     // entries the dump delivered
  uint64_t translated = 0;
  double cpu_s = 0;
  std::map<uint8_t, Protocol> protocols;  // by protocol number
  std::shared_ptr<FlowRecords> flows;     // with by_source only
};

Result Sample(const Request& request);

}  // namespace natstats

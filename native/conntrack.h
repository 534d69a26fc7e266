// Deleting the conntrack entries of flows whose NAT decision a config change flipped (README, "When
// it writes"), through libnetfilter_conntrack. Plain C++: nothing of N-API.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace conntrack {

struct Range {
  std::array<uint8_t, 16> first{};  // network byte order; IPv4 uses the first 4 bytes
  std::array<uint8_t, 16> last{};
};

// Which entries of the ranges' flows are deleted (README, "Existing flows"): `kForward`, those
// whose reply comes from a range (the destination the postrouting decision was made on: after
// DNAT); `kReverse`, those without NAT whose original source is in a range — a reply that reached
// the node after its flow's entry was deleted, taken for the start of a flow the other way round.
enum Directions : uint8_t { kForward = 1, kReverse = 2 };

struct FlushRequest {
  uint8_t family = 0;              // AF_INET or AF_INET6
  std::vector<uint8_t> protocols;  // empty: every protocol
  std::vector<Range> ranges;       // sorted by first, not overlapping
  uint8_t directions = kForward | kReverse;
};

struct FlushResult {
  bool ok = true;
  std::string error;
  // Entries deleted, by protocol number; entries seen in the family's dump.
  std::vector<std::pair<uint8_t, uint64_t>> deleted;
  uint64_t seen = 0;
};

// Dumps the family's entries (the kernel filters by family), deletes those of the directions asked
// for whose address lies in a range and whose protocol is asked for. Without conntrack in the
// kernel, or with no entry, nothing is deleted and it is not an error. A kernel that stops
// answering for 10 s ends the call with an error.
FlushResult Flush(const FlushRequest& request);

}  // namespace conntrack

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

struct FlushRequest {
  uint8_t family = 0;              // AF_INET or AF_INET6
  std::vector<uint8_t> protocols;  // empty: every protocol
  std::vector<Range> ranges;       // sorted by first, not overlapping
  // When not empty, only entries whose original source (the flow's sender) is in one of these
  // (sorted, not overlapping): the egress policy's sourceCIDRs changed for them.
  std::vector<Range> sources;
  // Only entries the kernel translated the source of (SNAT or masquerade): a changed snatAddress.
  bool translated_only = false;
  // Only list what would be deleted: the reply tuples of the matched UDP entries without SNAT
  // (whose replies go to the pod's own address), deleting nothing.
  bool list_only = false;
};

// A UDP flow's reply direction: the remote's address and port, and the pod's.
struct ReplyTuple {
  std::array<uint8_t, 16> source{};  // network byte order; IPv4 uses the first 4 bytes
  std::array<uint8_t, 16> destination{};
  uint16_t source_port = 0;  // host byte order
  uint16_t destination_port = 0;
};

struct FlushResult {
  bool ok = true;
  std::string error;
  // Entries deleted, by protocol number; entries seen in the family's dump.
  std::vector<std::pair<uint8_t, uint64_t>> deleted;
  uint64_t seen = 0;
  std::vector<ReplyTuple> replies;  // with list_only
};

// Dumps the family's entries (the kernel filters by family), deletes those whose reply comes from
// an address in a range — the destination the flow's packets are sent to after any DNAT, the one
// the postrouting decision was made on — and whose protocol is asked for. Without conntrack in the
// kernel, or with no entry, nothing is deleted and it is not an error. A kernel that stops
// answering for 10 s ends the call with an error.
FlushResult Flush(const FlushRequest& request);

}  // namespace conntrack

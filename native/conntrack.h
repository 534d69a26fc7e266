// Which conntrack entries a config change must delete so that their flows follow the new decision
// (docs/writes.md, "Existing flows"), judged entry by entry by both configs' decisions, and their
// deletion, through libnetfilter_conntrack; and the one dump of a family's entries and the one
// range lookup that judgement and the NAT sample (nat-stats.h) share. Plain C++: nothing of N-API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct nf_conntrack;

namespace conntrack {

struct Range {
  std::array<uint8_t, 16> first{};  // network byte order; IPv4 uses the first 4 bytes
  std::array<uint8_t, 16> last{};
};

// Whether `address` (`width` bytes) lies in one of `ranges`, which are sorted and disjoint. An
// empty list holds no address.
bool InRanges(const std::vector<Range>& ranges, const uint8_t* address, size_t width);

// Called for each entry dumped, with the dump's `data`: NFCT_CB_CONTINUE, or NFCT_CB_STOP to end
// the dump there.
using EntryCallback = int (*)(nf_conntrack* entry, void* data);

struct DumpEnd {
  bool ok = true;     // false: the handle could not be opened, or the dump failed
  std::string error;  // "nfct_open: ...", "dump: ..."
};

// Dumps the family's entries (AF_INET or AF_INET6: the kernel filters by family) to `on_entry`
// with `data`, on a handle of its own; `source_translated_only`: only source-translated entries,
// where the kernel filters by status (Linux 5.19 and later; the callback checks again). Without
// conntrack in the kernel, or in the namespace, nothing is dumped and it is no failure. A kernel
// that stops answering for 10 s ends it with a failure: a pool thread is never held for good.
DumpEnd Dump(uint8_t family, bool source_translated_only, EntryCallback on_entry, void* data);

// What one config decides for a family's flows beside their destination (docs/egress-policy.md,
// "Egress policy"): which senders and egress interfaces it considers, and what it translates to.
struct Policy {
  bool any_source = true;
  std::vector<Range> sources;  // sorted, disjoint
  bool any_interface = true;
  std::vector<std::string> interfaces;  // a trailing '*' matches every name that starts so
  bool snat = false;                    // translated to snat_range; else masqueraded
  Range snat_range;
};

struct JudgeRequest {
  uint8_t family = 0;              // AF_INET or AF_INET6
  std::vector<uint8_t> protocols;  // empty: every protocol
  // Destinations (after DNAT: the reply's source) exempt before the change only, and after only.
  std::vector<Range> lost;
  std::vector<Range> gained;
  // When the policies differ, any destination may change its decision: exempt_after holds every
  // destination exempt after the change. Otherwise only entries to lost and gained are looked at.
  bool policy_changed = false;
  std::vector<Range> exempt_after;
  Policy before;
  Policy after;
  size_t hold_max = 0;  // at most this many reply tuples held
};

// A UDP flow's reply direction: the remote's address and port, and the pod's.
struct ReplyTuple {
  std::array<uint8_t, 16> source{};  // network byte order; IPv4 uses the first 4 bytes
  std::array<uint8_t, 16> destination{};
  uint16_t source_port = 0;  // host byte order
  uint16_t destination_port = 0;
};

// The entries of a family whose decision the change flips and that still carry the old one.
struct Plan {
  Plan() = default;
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Deleted at once, once the held replies are in place.
  std::vector<nf_conntrack*> now;
  // Translated UDP flows still waiting for their first reply (a query in flight): deleted after a
  // grace, so that the answer comes back through the translation it was sent with.
  std::vector<nf_conntrack*> later;
  // The replies of the untranslated UDP flows among `now`, most recently active first: let
  // through untracked for a moment, so that none starts an entry the other way round.
  std::vector<ReplyTuple> hold;
  uint64_t seen = 0;      // entries of the family dumped
  uint64_t unjudged = 0;  // entries whose egress interface the routing could not tell: left alone
};

struct JudgeResult {
  bool ok = true;
  std::string error;
  std::shared_ptr<Plan> plan;
};

// Dumps the family's entries (the kernel filters by family) and sorts out those to delete: an
// entry whose decision differs between the two configs (its source, its egress interface as the
// routing finds it, its destination after DNAT) and whose own state is the old decision's (not
// translated, or translated to the old target): others keep their entry — the node's own traffic,
// flows whose decision stays, and flows another tool translated. Entries to local addresses never
// reach our chain and are never taken. Without conntrack in the kernel, nothing is found and it is
// not an error. A kernel that stops answering for 10 s ends the call with an error.
JudgeResult Judge(const JudgeRequest& request);

struct DeleteResult {
  bool ok = true;
  std::string error;
  std::vector<std::pair<uint8_t, uint64_t>> deleted;  // by protocol number
};

// Deletes these entries, each only if it is still the same entry (its conntrack id): an entry that
// ended meanwhile, or a new flow on the same addresses, is left alone.
DeleteResult Delete(const std::vector<nf_conntrack*>& entries);

}  // namespace conntrack

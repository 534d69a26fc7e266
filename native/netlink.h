// Plain netfilter netlink requests to nf_tables, without libnftables: they run in the agent's
// process and work where libnftables cannot read what the tables hold. Plain C++: nothing of N-API.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace netlink {

struct Status {
  bool ok;
  std::string error;  // on failure
};

// The namespace's nftables generation id (NFTA_GEN_ID): it moves on every committed transaction.
struct GenerationId {
  Status status;
  uint32_t id = 0;
};
GenerationId ReadGenerationId();

// Every table in the namespace, as nft names its family (ip, ip6, inet, arp, bridge, netdev).
struct TableName {
  std::string family;
  std::string name;
};
struct Tables {
  Status status;
  std::vector<TableName> tables;
};
Tables ListTables();

// Every chain of every table; a base chain carries its hook, priority and type.
struct Chain {
  std::string family;
  std::string table;
  std::string name;
  bool base = false;
  std::string hook;  // "prerouting", "input", "forward", "output", "postrouting", …
  int32_t priority = 0;
  std::string type;  // "filter", "nat", "route"
};
struct Chains {
  Status status;
  std::vector<Chain> chains;
};
Chains ListChains();

// One rule as its expressions show it: whether it source-translates and where it jumps. Read from
// the kernel's rule dump: no set's elements, nothing libnftables must be able to parse.
struct RuleShape {
  uint64_t handle = 0;
  bool translates = false;             // masq, nat of type snat, x_tables MASQUERADE/SNAT/NETMAP
  std::vector<std::string> jumps;      // chains named by a jump or goto verdict of its own
  std::vector<std::string> maps;       // verdict maps it looks up (anonymous ones too)
  std::vector<std::string> map_jumps;  // chains named by those maps' elements' verdicts
  // The source ports its translation takes (`masquerade to :A-B`, `snat to …:A-B`): the values its
  // immediate expressions load into the registers the nat or masq expression reads; -1 where none.
  int32_t port_min = -1;
  int32_t port_max = -1;
  std::vector<std::string> expressions;  // the expressions' names, in order
};
struct Rules {
  Status status;
  std::vector<RuleShape> rules;
};
// `family` as nft names it (ip, ip6, inet, …); an unknown one is an error.
Rules ListRules(const std::string& family, const std::string& table, const std::string& chain);

// A table's named counters and their counts (NFT_MSG_GETOBJ, filtered by the kernel to the table
// and to counters): no set's elements, no rules.
struct Counter {
  std::string name;
  uint64_t packets = 0;
  uint64_t bytes = 0;
};
struct Counters {
  Status status;
  std::vector<Counter> counters;
};
Counters ListCounters(const std::string& family, const std::string& table);

// Replaces what a set of ours holds with these keys, in one transaction (a batch of a flush and
// the additions), each element taking the set's own timeout. Keys are the set's key bytes, as the
// kernel stores a concatenation: each part in network order, padded to 4 bytes.
Status ReplaceSetElements(uint8_t family, const std::string& table, const std::string& set,
                          const std::vector<std::vector<uint8_t>>& keys);

// An element-only change of tables of ours, as one transaction (docs/writes.md, "The everyday
// edit"): each set's elements deleted, then added, then the rule carrying the write's mark replaced
// by the same rule with the new mark: its expressions as the kernel holds them, its comment
// changed. An element is its key then its end key (interval sets of a concatenation: the kernel's
// pipapo), each `key_len` bytes in the kernel's layout. With `pinned`, the kernel takes the batch
// only while the namespace is at `generation` (NFNL_BATCH_GENID): a commit by anyone since makes it
// refuse whole.
struct SetEdit {
  std::string set;
  size_t key_len = 0;
  // A plain interval set (rbtree): each range goes as a start element and an end element one past
  // its last address (none for a range up to the last address: its start is marked open), as
  // libnftables writes them. Otherwise a concatenated range set: a key and its end key.
  bool interval = false;
  // Flushed first, in the same transaction, and `added` is then everything it holds.
  bool refill = false;
  // A plain interval set none of whose ranges starts at the first address after the change: it
  // holds libnftables' marker there (an end element), which libnftables adds whenever that is so.
  bool marker = false;
  std::vector<uint8_t> removed;  // 2 * key_len bytes per element
  std::vector<uint8_t> added;
};
struct TableEdit {
  uint8_t family = 0;  // NFPROTO_IPV4 or NFPROTO_IPV6
  std::string table;
  std::vector<SetEdit> sets;
  // The chain of the marked rule; empty for a fill of sets no rule refers to yet (a change made
  // on new sets), which moves no mark.
  std::string chain;
  std::string was_mark;  // its comment now
  std::string mark;      // its comment after
};
struct ElementEdit {
  std::vector<TableEdit> tables;  // one transaction for all
  bool pinned = false;
  uint32_t generation = 0;
};
Status EditElements(const ElementEdit& edit);

}  // namespace netlink

namespace netlink {

// nf_tables' own notifications, as `nft monitor` hears them: a socket subscribed to
// NFNLGRP_NFTABLES, read without blocking. Each commit ends with its generation id; the tables
// its messages named ("ip ipmasq") come with it, each once.
struct Commit {
  uint32_t gen_id = 0;
  std::vector<std::string> tables;
  // It named more tables than are kept (kMaxCommitTables): which ones is not known.
  bool capped = false;
};
struct Monitor {
  Status status;
  int fd = -1;
};
Monitor OpenMonitor();
struct Heard {
  Status status;
  std::vector<Commit> commits;
  // The kernel dropped notifications (the socket's buffer was full), or a message came cut short:
  // what they named is unknown.
  bool overflow = false;
};
// Reads what is queued on the monitor's socket now; never waits.
Heard DrainMonitor(int fd);
// Leaves nf_tables' group (`mute`) or joins it again. While no socket is in the group, the kernel
// makes no notifications: a commit of 100 000 elements costs it less than half as much. Joined
// again, the next drain says notifications were lost (`overflow`), since any commit meanwhile went
// unheard.
Status MuteMonitor(int fd, bool mute);
void CloseMonitor(int fd);

}  // namespace netlink

namespace netlink {

// What a set of ours holds now (one NFT_MSG_GETSETELEM dump), each element as its first and last
// key, `key_len` bytes each in the kernel's layout, sorted by first key: a plain interval set's
// start and end items are paired back (an end item is one past the last key; a start with no end
// runs to the last key), a concatenated range set's key and end key taken as they are. For the
// audit of an element-only write (docs/writes.md, "The everyday edit"): no libnftables, no text.
struct SetElements {
  Status status;
  std::vector<uint8_t> elements;  // 2 * key_len bytes per element
};
SetElements ReadSetElements(uint8_t family, const std::string& table, const std::string& set,
                            size_t key_len, bool interval);

// The comments of a chain's rules, in order (a rule without one gives "").
struct Comments {
  Status status;
  std::vector<std::string> comments;
};
Comments RuleComments(uint8_t family, const std::string& table, const std::string& chain);

}  // namespace netlink

// Plain netfilter netlink requests to nf_tables, without libnftables: they run in the agent's
// process and work where libnftables cannot read what the tables hold. Plain C++: nothing of N-API.
#pragma once

#include <cstdint>
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

// Replaces what a set of ours holds with these keys, in one transaction (a batch of a flush and
// the additions), each element taking the set's own timeout. Keys are the set's key bytes, as the
// kernel stores a concatenation: each part in network order, padded to 4 bytes.
Status ReplaceSetElements(uint8_t family, const std::string& table, const std::string& set,
                          const std::vector<std::vector<uint8_t>>& keys);

}  // namespace netlink

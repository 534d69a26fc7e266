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

}  // namespace netlink

// Route lookups over rtnetlink for the conntrack flush (docs/writes.md, "Existing flows"):
// conntrack does not record the interface a flow leaves through, so the flush asks the kernel's
// routing for it, as the flow's packets are routed. Plain C++: nothing of N-API.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace route {

// One rtnetlink socket, and what it learnt, for the lookups of one flush of one family.
class Resolver {
 public:
  explicit Resolver(int family);  // AF_INET or AF_INET6
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Whether the address is local to the node: the destination of a route of type local, as
  // `fib daddr type local` finds it. Addresses are 4 or 16 bytes, network order.
  bool Local(const uint8_t* address);

  // The name of the interface a flow from `source` to `destination` leaves through: routed as the
  // node's own traffic when the source is local, else as forwarded traffic arriving on the
  // interface that routes back to the source. Empty when the kernel has no route for it.
  std::string Egress(const uint8_t* source, const uint8_t* destination);

 private:
  struct Prefix {
    std::vector<uint8_t> address;
    int length;
  };
  // RTM_GETROUTE for one destination: the interface index and route type, or 0 on failure.
  int Lookup(const uint8_t* destination, const uint8_t* source, int input_interface,
             int* route_type);
  void LoadLocalPrefixes();

  int family_;
  size_t width_;
  int fd_ = -1;
  uint32_t seq_ = 0;
  bool local_loaded_ = false;
  std::vector<Prefix> local_;
  std::unordered_map<std::string, int> arrival_;         // source → the interface back to it
  std::unordered_map<std::string, std::string> egress_;  // source + destination → interface name
};

}  // namespace route

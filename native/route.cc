// route.h: RTM_GETROUTE lookups and a dump of the local routes, on one rtnetlink socket.
#include "route.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace route {
namespace {

void AddAttr(nlmsghdr* message, size_t room, uint16_t type, const void* data, size_t length) {
  const size_t at = NLMSG_ALIGN(message->nlmsg_len);
  const size_t size = RTA_LENGTH(length);
  if (at + RTA_ALIGN(size) > room) return;
  auto* attr = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(message) + at);
  attr->rta_type = type;
  attr->rta_len = static_cast<uint16_t>(size);
  memcpy(RTA_DATA(attr), data, length);
  message->nlmsg_len = static_cast<uint32_t>(at + RTA_ALIGN(size));
}

// Whether `address` (width bytes) lies in the prefix.
bool InPrefix(const uint8_t* address, const std::vector<uint8_t>& prefix, int length) {
  int full = length / 8;
  if (memcmp(address, prefix.data(), static_cast<size_t>(full)) != 0) return false;
  int rest = length % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (address[full] & mask) == (prefix[static_cast<size_t>(full)] & mask);
}

}  // namespace

Resolver::Resolver(int family) : family_(family), width_(family == AF_INET ? 4 : 16) {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd_ >= 0) {
    timeval limit{5, 0};  // the kernel answers in microseconds; never wait forever
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  }
}

Resolver::~Resolver() {
  if (fd_ >= 0) close(fd_);
}

void Resolver::LoadLocalPrefixes() {
  local_loaded_ = true;
  if (fd_ < 0) return;
  struct {
    nlmsghdr header;
    rtmsg route;
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.header.nlmsg_seq = ++seq_;
  request.route.rtm_family = static_cast<uint8_t>(family_);
  if (send(fd_, &request, request.header.nlmsg_len, 0) < 0) return;
  alignas(nlmsghdr) static thread_local char buffer[65536];
  for (;;) {
    ssize_t length = recv(fd_, buffer, sizeof(buffer), 0);
    if (length < 0 && errno == EINTR) continue;
    if (length <= 0) return;
    int left = static_cast<int>(length);
    for (auto* message = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(message, left);
         message = NLMSG_NEXT(message, left)) {
      if (message->nlmsg_type == NLMSG_DONE || message->nlmsg_type == NLMSG_ERROR) return;
      if (message->nlmsg_type != RTM_NEWROUTE) continue;
      auto* route = static_cast<rtmsg*>(NLMSG_DATA(message));
      if (route->rtm_type != RTN_LOCAL) continue;
      int attrs = static_cast<int>(RTM_PAYLOAD(message));
      for (auto* attr = RTM_RTA(route); RTA_OK(attr, attrs); attr = RTA_NEXT(attr, attrs)) {
        if (attr->rta_type != RTA_DST || RTA_PAYLOAD(attr) != width_) continue;
        const auto* bytes = static_cast<const uint8_t*>(RTA_DATA(attr));
        local_.push_back({std::vector<uint8_t>(bytes, bytes + width_), route->rtm_dst_len});
      }
    }
  }
}

bool Resolver::Local(const uint8_t* address) {
  if (!local_loaded_) LoadLocalPrefixes();
  for (const auto& prefix : local_)
    if (InPrefix(address, prefix.address, prefix.length)) return true;
  return false;
}

int Resolver::Lookup(const uint8_t* destination, const uint8_t* source, int input_interface,
                     int* route_type) {
  if (fd_ < 0) return 0;
  struct {
    nlmsghdr header;
    rtmsg route;
    char attrs[128];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = ++seq_;
  request.route.rtm_family = static_cast<uint8_t>(family_);
  const auto bits = static_cast<uint8_t>(width_ * 8);
  request.route.rtm_dst_len = bits;
  AddAttr(&request.header, sizeof(request), RTA_DST, destination, width_);
  if (source != nullptr) {
    request.route.rtm_src_len = bits;
    AddAttr(&request.header, sizeof(request), RTA_SRC, source, width_);
  }
  if (input_interface > 0) {
    const uint32_t index = static_cast<uint32_t>(input_interface);
    AddAttr(&request.header, sizeof(request), RTA_IIF, &index, sizeof(index));
  }
  if (send(fd_, &request, request.header.nlmsg_len, 0) < 0) return 0;
  alignas(nlmsghdr) char buffer[4096];
  for (;;) {
    ssize_t length = recv(fd_, buffer, sizeof(buffer), 0);
    if (length < 0 && errno == EINTR) continue;
    if (length <= 0) return 0;
    int left = static_cast<int>(length);
    for (auto* message = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(message, left);
         message = NLMSG_NEXT(message, left)) {
      if (message->nlmsg_seq != seq_) continue;  // a late answer to an earlier request
      if (message->nlmsg_type == NLMSG_ERROR) return 0;
      if (message->nlmsg_type != RTM_NEWROUTE) continue;
      auto* route = static_cast<rtmsg*>(NLMSG_DATA(message));
      *route_type = route->rtm_type;
      int attrs = static_cast<int>(RTM_PAYLOAD(message));
      for (auto* attr = RTM_RTA(route); RTA_OK(attr, attrs); attr = RTA_NEXT(attr, attrs)) {
        if (attr->rta_type == RTA_OIF && RTA_PAYLOAD(attr) >= sizeof(uint32_t)) {
          uint32_t index;
          memcpy(&index, RTA_DATA(attr), sizeof(index));
          return static_cast<int>(index);
        }
      }
      return 0;
    }
  }
}

std::string Resolver::Egress(const uint8_t* source, const uint8_t* destination) {
  const std::string key(reinterpret_cast<const char*>(source), width_);
  const std::string pair = key + std::string(reinterpret_cast<const char*>(destination), width_);
  if (auto known = egress_.find(pair); known != egress_.end()) return known->second;
  int type = RTN_UNSPEC;
  int out = 0;
  if (Local(source)) {
    out = Lookup(destination, source, 0, &type);
  } else {
    auto arrival = arrival_.find(key);
    if (arrival == arrival_.end()) {
      int back_type = RTN_UNSPEC;
      arrival = arrival_.emplace(key, Lookup(source, nullptr, 0, &back_type)).first;
    }
    if (arrival->second > 0) out = Lookup(destination, source, arrival->second, &type);
  }
  char name[IF_NAMESIZE] = {};
  std::string found;
  if (out > 0 && type == RTN_UNICAST && if_indextoname(static_cast<unsigned>(out), name) != nullptr)
    found = name;
  egress_.emplace(pair, found);
  return found;
}

}  // namespace route

// netlink.h: NFT_MSG_GETGEN and an NFT_MSG_GETTABLE dump on a netfilter netlink socket.
#include "netlink.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>

#include "runner.h"

namespace netlink {
namespace {

// One nf_tables request on a netfilter netlink socket. For each message of the answer,
// `on_message` gets its nfgenmsg family, then `on_attr` each attribute (type, payload, length)
// and returns false to stop. Errors come back as the Status's text.
using MessageVisitor = std::function<void(uint8_t family)>;
using AttrVisitor = std::function<bool(uint16_t type, const char* data, size_t len)>;

Status NetlinkRequest(uint16_t msg_type, uint16_t flags, const std::string& what,
                      const MessageVisitor& on_message, const AttrVisitor& on_attr) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno)};
  std::unique_ptr<int, std::function<void(int*)>> guard(&fd, [](int* f) {
    const int closing = *f;
    runner::Later([closing] { close(closing); });
  });
  timeval limit{5, 0};  // a kernel answers in microseconds; never wait forever
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  struct {
    nlmsghdr nlh;
    nfgenmsg nfg;
  } req{};
  req.nlh.nlmsg_len = sizeof(req);
  req.nlh.nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg_type);
  req.nlh.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  req.nlh.nlmsg_seq = 1;
  req.nfg.nfgen_family = AF_UNSPEC;
  req.nfg.version = NFNETLINK_V0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return {false, std::string("netlink send: ") + strerror(errno)};
  const bool dump = (flags & NLM_F_DUMP) != 0;
  alignas(nlmsghdr) static thread_local char buf[65536];
  for (;;) {
    ssize_t len = recv(fd, buf, sizeof(buf), 0);
    if (len < 0 && errno == EINTR) continue;
    if (len < 0) return {false, std::string("netlink recv: ") + strerror(errno)};
    for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nlh, len);
         nlh = NLMSG_NEXT(nlh, len)) {
      if (nlh->nlmsg_type == NLMSG_DONE) return {true, ""};
      if (nlh->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(nlh));
        if (e->error == 0) continue;
        return {false, what + ": " + strerror(-e->error)};
      }
      on_message(static_cast<nfgenmsg*>(NLMSG_DATA(nlh))->nfgen_family);
      int attrs_len = static_cast<int>(nlh->nlmsg_len) - NLMSG_SPACE(sizeof(nfgenmsg));
      auto* attr = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(nlh)) +
                                             NLMSG_ALIGN(sizeof(nfgenmsg)));
      while (attrs_len >= static_cast<int>(sizeof(nlattr)) && attr->nla_len >= sizeof(nlattr) &&
             attr->nla_len <= attrs_len) {
        if (!on_attr(attr->nla_type & NLA_TYPE_MASK, reinterpret_cast<char*>(attr) + NLA_HDRLEN,
                     attr->nla_len - NLA_HDRLEN))
          return {true, ""};
        attrs_len -= NLA_ALIGN(attr->nla_len);
        attr = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(attr) + NLA_ALIGN(attr->nla_len));
      }
    }
    if (!dump) return {true, ""};
  }
}

const char* FamilyName(uint8_t family) {
  switch (family) {
    case NFPROTO_INET:
      return "inet";
    case NFPROTO_IPV4:
      return "ip";
    case NFPROTO_ARP:
      return "arp";
    case NFPROTO_NETDEV:
      return "netdev";
    case NFPROTO_BRIDGE:
      return "bridge";
    case NFPROTO_IPV6:
      return "ip6";
    default:
      return nullptr;
  }
}

}  // namespace

// One NFT_MSG_GETGEN request, answered with NFTA_GEN_ID (big-endian u32).
GenerationId ReadGenerationId() {
  GenerationId result{{true, ""}};
  bool found = false;
  result.status = NetlinkRequest(
      NFT_MSG_GETGEN, 0, "NFT_MSG_GETGEN", [](uint8_t) {},
      [&](uint16_t type, const char* data, size_t len) {
        if (type != NFTA_GEN_ID || len < 4) return true;
        uint32_t raw;
        memcpy(&raw, data, sizeof(raw));
        result.id = ntohl(raw);
        found = true;
        return false;
      });
  if (result.status.ok && !found)
    result.status = {false, "NFT_MSG_GETGEN: no generation id in the answer"};
  return result;
}

// One NFT_MSG_GETTABLE dump; tables of a family nft has no name for are left out.
Tables ListTables() {
  Tables result{{true, ""}, {}};
  const char* family = nullptr;
  result.status = NetlinkRequest(
      NFT_MSG_GETTABLE, NLM_F_DUMP, "NFT_MSG_GETTABLE",
      [&family](uint8_t f) { family = FamilyName(f); },
      [&](uint16_t type, const char* data, size_t len) {
        if (type == NFTA_TABLE_NAME && family)
          result.tables.push_back({family, std::string(data, strnlen(data, len))});
        return true;
      });
  return result;
}

}  // namespace netlink

// netlink-wire.h: the wire helpers every part of netlink.h shares: one request and its answer,
// a batch's messages and its acknowledgements, attributes read and written.
#include "netlink-wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nf_tables_compat.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "later.h"

namespace netlink {
namespace wire {

size_t Writer::Begin(uint16_t type) {
  size_t at = buffer_->size();
  Put(type, nullptr, 0);
  return at;
}

void Writer::End(size_t at) {
  auto* attr = reinterpret_cast<nlattr*>(buffer_->data() + at);
  attr->nla_len = static_cast<uint16_t>(buffer_->size() - at);
}

void Writer::Put(uint16_t type, const void* data, size_t length) {
  nlattr attr{static_cast<uint16_t>(NLA_HDRLEN + length), type};
  Append(&attr, sizeof(attr));
  Append(data, length);
  buffer_->resize(NLA_ALIGN(buffer_->size()));
}

void Writer::PutString(uint16_t type, const std::string& text) {
  Put(type, text.c_str(), text.size() + 1);
}

void Writer::Append(const void* data, size_t length) {
  if (length == 0) return;
  const auto* bytes = static_cast<const char*>(data);
  buffer_->insert(buffer_->end(), bytes, bytes + length);
}

Status NetlinkRequest(uint16_t msg_type, uint16_t flags, const std::string& what,
                      const MessageVisitor& on_message, const AttrVisitor& on_attr, uint8_t family,
                      const std::vector<char>& attrs) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno)};
  std::unique_ptr<int, std::function<void(int*)>> guard(&fd, [](int* f) { later::Close(*f); });
  timeval limit{5, 0};  // a kernel answers in microseconds; never wait forever
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  struct {
    nlmsghdr nlh;
    nfgenmsg nfg;
  } head{};
  head.nlh.nlmsg_len = static_cast<uint32_t>(sizeof(head) + attrs.size());
  head.nlh.nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg_type);
  head.nlh.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  head.nlh.nlmsg_seq = 1;
  head.nfg.nfgen_family = family;
  head.nfg.version = NFNETLINK_V0;
  std::vector<char> req(reinterpret_cast<const char*>(&head),
                        reinterpret_cast<const char*>(&head) + sizeof(head));
  req.insert(req.end(), attrs.begin(), attrs.end());
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, req.data(), req.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) <
      0)
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

// Starts a message of the batch; Finish sets its length.
size_t StartMessage(std::vector<char>* batch, uint16_t type, uint16_t flags, uint8_t family,
                    uint32_t seq, uint16_t res_id) {
  size_t at = batch->size();
  batch->resize(at + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
  auto* header = reinterpret_cast<nlmsghdr*>(batch->data() + at);
  header->nlmsg_type = type;
  header->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  header->nlmsg_seq = seq;
  auto* nfg = reinterpret_cast<nfgenmsg*>(batch->data() + at + NLMSG_HDRLEN);
  nfg->nfgen_family = family;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(res_id);
  return at;
}

void FinishMessage(std::vector<char>* batch, size_t at) {
  batch->resize(NLMSG_ALIGN(batch->size()));
  reinterpret_cast<nlmsghdr*>(batch->data() + at)->nlmsg_len =
      static_cast<uint32_t>(batch->size() - at);
}

// Sends one batch and reads the `acked` ACKs it asks for; any error means the kernel took none of
// it. `what` names the change in an error.
Status SendBatch(const std::vector<char>& batch, size_t acked, const std::string& what) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno)};
  // Closed on a thread of its own: after a deletion the close waits for the kernel (later.h).
  std::unique_ptr<int, std::function<void(int*)>> guard(&fd, [](int* f) { later::Close(*f); });
  timeval limit{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  int room = static_cast<int>(batch.size()) * 2;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof(room));
  // Room for every acknowledgement at once: the kernel sends them all before we read one, each
  // taking about a kilobyte of the buffer, and a refill of 100 000 elements asks for hundreds.
  int answers = static_cast<int>(std::min<size_t>(acked * 2048 + 65536, 64 << 20));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &answers, sizeof(answers));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, batch.data(), batch.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
             sizeof(kernel)) < 0)
    return {false, std::string("netlink send: ") + strerror(errno)};
  alignas(nlmsghdr) static thread_local char buf[65536];
  size_t answered = 0;
  while (answered < acked) {
    ssize_t len = recv(fd, buf, sizeof(buf), 0);
    if (len < 0 && errno == EINTR) continue;
    if (len < 0) return {false, std::string("netlink recv: ") + strerror(errno)};
    for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nlh, len);
         nlh = NLMSG_NEXT(nlh, len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(nlh));
      if (e->error == -ERESTART)
        return {false, what + ": another commit came since the generation it was worked out at"};
      if (e->error != 0) return {false, what + ": " + strerror(-e->error)};
      answered++;
    }
  }
  return {true, ""};
}

// Calls `visit` for each attribute in a nested attribute's payload.
void ForEachAttr(const char* data, size_t len,
                 const std::function<void(uint16_t type, const char* data, size_t len)>& visit) {
  while (len >= sizeof(nlattr)) {
    const auto* attr = reinterpret_cast<const nlattr*>(data);
    if (attr->nla_len < sizeof(nlattr) || attr->nla_len > len) return;
    visit(attr->nla_type & NLA_TYPE_MASK, data + NLA_HDRLEN, attr->nla_len - NLA_HDRLEN);
    size_t step = NLA_ALIGN(attr->nla_len);
    if (step >= len) return;
    data += step;
    len -= step;
  }
}

std::string Text(const char* data, size_t len) { return std::string(data, strnlen(data, len)); }

uint32_t Be32(const char* data, size_t len) {
  uint32_t raw = 0;
  if (len >= sizeof(raw)) memcpy(&raw, data, sizeof(raw));
  return ntohl(raw);
}

uint64_t Be64(const char* data, size_t len) {
  uint64_t raw = 0;
  if (len >= sizeof(raw)) memcpy(&raw, data, sizeof(raw));
  return be64toh(raw);
}

const char* HookName(const std::string& family, uint32_t hook) {
  if (family == "netdev") return hook == 0 ? "ingress" : hook == 1 ? "egress" : "unknown";
  switch (hook) {
    case NF_INET_PRE_ROUTING:
      return "prerouting";
    case NF_INET_LOCAL_IN:
      return "input";
    case NF_INET_FORWARD:
      return "forward";
    case NF_INET_LOCAL_OUT:
      return "output";
    case NF_INET_POST_ROUTING:
      return "postrouting";
    case NF_INET_INGRESS:
      return "ingress";
    default:
      return "unknown";
  }
}

uint8_t FamilyNumber(const std::string& name) {
  if (name == "ip") return NFPROTO_IPV4;
  if (name == "ip6") return NFPROTO_IPV6;
  if (name == "inet") return NFPROTO_INET;
  if (name == "arp") return NFPROTO_ARP;
  if (name == "bridge") return NFPROTO_BRIDGE;
  if (name == "netdev") return NFPROTO_NETDEV;
  return NFPROTO_UNSPEC;
}

// The comment in a rule's userdata (TLVs of a type byte and a length byte: libnftnl's udata).
std::string CommentOf(const std::string& userdata) {
  size_t at = 0;
  while (at + 2 <= userdata.size()) {
    const auto type = static_cast<uint8_t>(userdata[at]);
    const auto len = static_cast<uint8_t>(userdata[at + 1]);
    if (at + 2 + len > userdata.size()) break;
    if (type == 0 /* NFTNL_UDATA_RULE_COMMENT */) return Text(userdata.data() + at + 2, len);
    at += 2 + len;
  }
  return "";
}

// One chain's rules as the kernel holds them (a NFT_MSG_GETRULE dump filtered to the chain).
Status ChainRules(uint8_t family, const std::string& table, const std::string& chain,
                  std::vector<RawRule>* rules) {
  std::vector<char> filter;
  Writer writer(&filter);
  writer.PutString(NFTA_RULE_TABLE, table);
  writer.PutString(NFTA_RULE_CHAIN, chain);
  return NetlinkRequest(
      NFT_MSG_GETRULE, NLM_F_DUMP, "NFT_MSG_GETRULE", [&](uint8_t) { rules->push_back({}); },
      [&](uint16_t type, const char* data, size_t len) {
        if (type == NFTA_RULE_HANDLE) rules->back().handle = Be64(data, len);
        if (type == NFTA_RULE_EXPRESSIONS) rules->back().expressions.assign(data, len);
        if (type == NFTA_RULE_USERDATA) rules->back().userdata.assign(data, len);
        return true;
      },
      family, filter);
}

}  // namespace wire
}  // namespace netlink

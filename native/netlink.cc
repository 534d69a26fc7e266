// netlink.h: NFT_MSG_GETGEN, the table, chain and rule dumps, and a set's elements replaced, on a
// netfilter netlink socket.
#include "netlink.h"

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
namespace {

// One nf_tables request on a netfilter netlink socket. For each message of the answer,
// `on_message` gets its nfgenmsg family, then `on_attr` each attribute (type, payload, length)
// and returns false to stop. Errors come back as the Status's text.
using MessageVisitor = std::function<void(uint8_t family)>;
using AttrVisitor = std::function<bool(uint16_t type, const char* data, size_t len)>;

Status NetlinkRequest(uint16_t msg_type, uint16_t flags, const std::string& what,
                      const MessageVisitor& on_message, const AttrVisitor& on_attr,
                      uint8_t family = AF_UNSPEC, const std::vector<char>& attrs = {}) {
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

namespace {

// Appends a netlink attribute (nested when `nest`: its length is fixed by End).
class Writer {
 public:
  explicit Writer(std::vector<char>* buffer) : buffer_(buffer) {}
  size_t Begin(uint16_t type) {
    size_t at = buffer_->size();
    Put(type, nullptr, 0);
    return at;
  }
  void End(size_t at) {
    auto* attr = reinterpret_cast<nlattr*>(buffer_->data() + at);
    attr->nla_len = static_cast<uint16_t>(buffer_->size() - at);
  }
  void Put(uint16_t type, const void* data, size_t length) {
    nlattr attr{static_cast<uint16_t>(NLA_HDRLEN + length), type};
    Append(&attr, sizeof(attr));
    Append(data, length);
    buffer_->resize(NLA_ALIGN(buffer_->size()));
  }
  void PutString(uint16_t type, const std::string& text) {
    Put(type, text.c_str(), text.size() + 1);
  }

 private:
  void Append(const void* data, size_t length) {
    if (length == 0) return;
    const auto* bytes = static_cast<const char*>(data);
    buffer_->insert(buffer_->end(), bytes, bytes + length);
  }
  std::vector<char>* buffer_;
};

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

// An nlattr's length is 16 bits: the elements go in messages well under that.
constexpr size_t kElementsPerMessage = 512;

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

}  // namespace

Status ReplaceSetElements(uint8_t family, const std::string& table, const std::string& set,
                          const std::vector<std::vector<uint8_t>>& keys) {
  const uint16_t nft = NFNL_SUBSYS_NFTABLES << 8;
  std::vector<char> batch;
  uint32_t seq = 1;
  FinishMessage(&batch, StartMessage(&batch, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, seq++,
                                     NFNL_SUBSYS_NFTABLES));
  // The set's elements flushed: a DELSETELEM naming no element.
  std::vector<uint32_t> acked;
  size_t message = StartMessage(&batch, nft | NFT_MSG_DELSETELEM, NLM_F_ACK, family, seq, 0);
  acked.push_back(seq++);
  {
    Writer attrs(&batch);
    attrs.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
    attrs.PutString(NFTA_SET_ELEM_LIST_SET, set);
  }
  FinishMessage(&batch, message);
  for (size_t first = 0; first < keys.size(); first += kElementsPerMessage) {
    message =
        StartMessage(&batch, nft | NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_ACK, family, seq, 0);
    acked.push_back(seq++);
    Writer attrs(&batch);
    attrs.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
    attrs.PutString(NFTA_SET_ELEM_LIST_SET, set);
    size_t list = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_LIST_ELEMENTS);
    for (size_t i = first; i < keys.size() && i < first + kElementsPerMessage; i++) {
      size_t element = attrs.Begin(NLA_F_NESTED | NFTA_LIST_ELEM);
      size_t key = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_KEY);
      attrs.Put(NFTA_DATA_VALUE, keys[i].data(), keys[i].size());
      attrs.End(key);
      attrs.End(element);
    }
    attrs.End(list);
    FinishMessage(&batch, message);
  }
  FinishMessage(
      &batch, StartMessage(&batch, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, seq++, NFNL_SUBSYS_NFTABLES));

  return SendBatch(batch, acked.size(), "set " + set + " of table " + table);
}

namespace {

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

// The x_tables targets (iptables-nft's compat expressions) that rewrite the source address.
bool TranslatingTarget(const std::string& name) {
  return name == "MASQUERADE" || name == "SNAT" || name == "NETMAP";
}

// The chain a jump or goto names in an nft_data payload (NFTA_DATA_VERDICT), or "" for any other.
std::string VerdictChain(const char* data, size_t len) {
  std::string found;
  ForEachAttr(data, len, [&](uint16_t data_type, const char* verdict, size_t verdict_len) {
    if (data_type != NFTA_DATA_VERDICT) return;
    int32_t code = 0;
    std::string chain;
    ForEachAttr(verdict, verdict_len, [&](uint16_t type, const char* v, size_t v_len) {
      if (type == NFTA_VERDICT_CODE) code = static_cast<int32_t>(Be32(v, v_len));
      if (type == NFTA_VERDICT_CHAIN) chain = Text(v, v_len);
    });
    if (code == NFT_JUMP || code == NFT_GOTO) found = chain;
  });
  return found;
}

// The distinct chains a verdict map's elements jump or go to (one NFT_MSG_GETSETELEM dump).
Status MapChains(uint8_t family, const std::string& table, const std::string& map,
                 std::vector<std::string>* chains);

// What a rule's earlier expressions loaded, while its expressions are read in order: each
// register's 16- or 32-bit value.
using Registers = std::map<uint32_t, uint32_t>;

// One expression of a rule: its name, and what it adds to the rule's shape.
void ReadExpression(const char* data, size_t len, RuleShape* rule, Registers* registers) {
  std::string name;
  const char* payload = nullptr;
  size_t payload_len = 0;
  ForEachAttr(data, len, [&](uint16_t type, const char* value, size_t value_len) {
    if (type == NFTA_EXPR_NAME) name = Text(value, value_len);
    if (type == NFTA_EXPR_DATA) {
      payload = value;
      payload_len = value_len;
    }
  });
  rule->expressions.push_back(name);
  if (name == "masq") rule->translates = true;
  if (!payload) return;
  // The port range a nat or masq expression takes from its registers.
  const auto ports_from = [rule, registers](uint32_t min_register, uint32_t max_register) {
    const auto min = registers->find(min_register);
    if (min_register == 0 || min == registers->end()) return;
    const auto max = registers->find(max_register);
    rule->port_min = static_cast<int32_t>(min->second);
    rule->port_max = static_cast<int32_t>(
        max_register != 0 && max != registers->end() ? max->second : min->second);
  };
  if (name == "nat") {
    uint32_t min_register = 0, max_register = 0;
    bool snat = false;
    ForEachAttr(payload, payload_len, [&](uint16_t type, const char* value, size_t value_len) {
      if (type == NFTA_NAT_TYPE && Be32(value, value_len) == NFT_NAT_SNAT) snat = true;
      if (type == NFTA_NAT_REG_PROTO_MIN) min_register = Be32(value, value_len);
      if (type == NFTA_NAT_REG_PROTO_MAX) max_register = Be32(value, value_len);
    });
    if (snat) {
      rule->translates = true;
      ports_from(min_register, max_register);
    }
  } else if (name == "masq") {
    uint32_t min_register = 0, max_register = 0;
    ForEachAttr(payload, payload_len, [&](uint16_t type, const char* value, size_t value_len) {
      if (type == NFTA_MASQ_REG_PROTO_MIN) min_register = Be32(value, value_len);
      if (type == NFTA_MASQ_REG_PROTO_MAX) max_register = Be32(value, value_len);
    });
    ports_from(min_register, max_register);
  } else if (name == "target") {
    ForEachAttr(payload, payload_len, [&](uint16_t type, const char* value, size_t value_len) {
      if (type == NFTA_TARGET_NAME && TranslatingTarget(Text(value, value_len)))
        rule->translates = true;
    });
  } else if (name == "lookup") {
    // A lookup whose result goes to the verdict register is a verdict map (`vmap`).
    std::string set;
    bool verdict = false;
    ForEachAttr(payload, payload_len, [&](uint16_t type, const char* value, size_t value_len) {
      if (type == NFTA_LOOKUP_SET) set = Text(value, value_len);
      if (type == NFTA_LOOKUP_DREG) verdict = Be32(value, value_len) == NFT_REG_VERDICT;
    });
    if (verdict && !set.empty()) rule->maps.push_back(set);
  } else if (name == "immediate") {
    // A verdict in NFTA_IMMEDIATE_DATA / NFTA_DATA_VERDICT: code and, for jump and goto, a chain;
    // or a value (NFTA_DATA_VALUE) loaded into NFTA_IMMEDIATE_DREG: a port is two bytes, network
    // order.
    uint32_t dreg = 0;
    int64_t loaded = -1;
    ForEachAttr(payload, payload_len, [&](uint16_t type, const char* value, size_t value_len) {
      if (type == NFTA_IMMEDIATE_DREG) dreg = Be32(value, value_len);
      if (type != NFTA_IMMEDIATE_DATA) return;
      std::string chain = VerdictChain(value, value_len);
      if (!chain.empty()) rule->jumps.push_back(chain);
      ForEachAttr(value, value_len, [&](uint16_t data_type, const char* v, size_t v_len) {
        if (data_type != NFTA_DATA_VALUE) return;
        if (v_len == 2) loaded = (static_cast<uint8_t>(v[0]) << 8) | static_cast<uint8_t>(v[1]);
        if (v_len == 4) loaded = Be32(v, v_len);
      });
    });
    if (dreg != NFT_REG_VERDICT && loaded >= 0) (*registers)[dreg] = static_cast<uint32_t>(loaded);
  }
}

}  // namespace

// One NFT_MSG_GETCHAIN dump of every family.
Chains ListChains() {
  Chains result{{true, ""}, {}};
  Chain* current = nullptr;
  const char* family = nullptr;
  result.status = NetlinkRequest(
      NFT_MSG_GETCHAIN, NLM_F_DUMP, "NFT_MSG_GETCHAIN",
      [&](uint8_t f) {
        family = FamilyName(f);
        current = nullptr;
        if (family) {
          result.chains.push_back({});
          current = &result.chains.back();
          current->family = family;
        }
      },
      [&](uint16_t type, const char* data, size_t len) {
        if (!current) return true;
        if (type == NFTA_CHAIN_TABLE) current->table = Text(data, len);
        if (type == NFTA_CHAIN_NAME) current->name = Text(data, len);
        if (type == NFTA_CHAIN_TYPE) current->type = Text(data, len);
        if (type == NFTA_CHAIN_HOOK) {
          current->base = true;
          ForEachAttr(data, len, [&](uint16_t hook_type, const char* value, size_t value_len) {
            if (hook_type == NFTA_HOOK_HOOKNUM)
              current->hook = HookName(current->family, Be32(value, value_len));
            if (hook_type == NFTA_HOOK_PRIORITY)
              current->priority = static_cast<int32_t>(Be32(value, value_len));
          });
        }
        return true;
      });
  return result;
}

// One NFT_MSG_GETRULE dump, filtered by the kernel to the one chain.
Rules ListRules(const std::string& family, const std::string& table, const std::string& chain) {
  Rules result{{true, ""}, {}};
  const uint8_t number = FamilyNumber(family);
  if (number == NFPROTO_UNSPEC) return {{false, "unknown family " + family}, {}};
  std::vector<char> attrs;
  Writer writer(&attrs);
  writer.PutString(NFTA_RULE_TABLE, table);
  writer.PutString(NFTA_RULE_CHAIN, chain);
  RuleShape* current = nullptr;
  result.status = NetlinkRequest(
      NFT_MSG_GETRULE, NLM_F_DUMP, "NFT_MSG_GETRULE",
      [&](uint8_t) {
        result.rules.push_back({});
        current = &result.rules.back();
      },
      [&](uint16_t type, const char* data, size_t len) {
        if (type == NFTA_RULE_HANDLE) current->handle = Be64(data, len);
        if (type == NFTA_RULE_EXPRESSIONS) {
          Registers registers;
          ForEachAttr(data, len, [&](uint16_t item, const char* value, size_t value_len) {
            if (item == NFTA_LIST_ELEM) ReadExpression(value, value_len, current, &registers);
          });
        }
        return true;
      },
      number, attrs);
  if (!result.status.ok) return result;
  // The chains verdict maps send to, each map read once.
  std::map<std::string, std::vector<std::string>> targets;
  for (RuleShape& rule : result.rules) {
    for (const std::string& map : rule.maps) {
      auto found = targets.find(map);
      if (found == targets.end()) {
        std::vector<std::string> chains;
        Status read = MapChains(number, table, map, &chains);
        if (!read.ok) return {read, {}};
        found = targets.emplace(map, std::move(chains)).first;
      }
      for (const std::string& chain : found->second)
        if (std::find(rule.map_jumps.begin(), rule.map_jumps.end(), chain) == rule.map_jumps.end())
          rule.map_jumps.push_back(chain);
    }
  }
  return result;
}

namespace {

Status MapChains(uint8_t family, const std::string& table, const std::string& map,
                 std::vector<std::string>* chains) {
  std::vector<char> attrs;
  Writer writer(&attrs);
  writer.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
  writer.PutString(NFTA_SET_ELEM_LIST_SET, map);
  std::set<std::string> seen;
  return NetlinkRequest(
      NFT_MSG_GETSETELEM, NLM_F_DUMP, "NFT_MSG_GETSETELEM", [](uint8_t) {},
      [&](uint16_t type, const char* data, size_t len) {
        if (type != NFTA_SET_ELEM_LIST_ELEMENTS) return true;
        ForEachAttr(data, len, [&](uint16_t elem, const char* element, size_t element_len) {
          if (elem != NFTA_LIST_ELEM) return;
          ForEachAttr(element, element_len,
                      [&](uint16_t attr, const char* value, size_t value_len) {
                        if (attr != NFTA_SET_ELEM_DATA) return;
                        std::string chain = VerdictChain(value, value_len);
                        if (!chain.empty() && seen.insert(chain).second) chains->push_back(chain);
                      });
        });
        return true;
      },
      family, attrs);
}

}  // namespace

// One NFT_MSG_GETOBJ dump of the table's counters.
Counters ListCounters(const std::string& family, const std::string& table) {
  Counters result{{true, ""}, {}};
  const uint8_t number = FamilyNumber(family);
  if (number == NFPROTO_UNSPEC) return {{false, "unknown family " + family}, {}};
  std::vector<char> attrs;
  Writer writer(&attrs);
  writer.PutString(NFTA_OBJ_TABLE, table);
  const uint32_t type = htonl(NFT_OBJECT_COUNTER);
  writer.Put(NFTA_OBJ_TYPE, &type, sizeof(type));
  Counter* current = nullptr;
  result.status = NetlinkRequest(
      NFT_MSG_GETOBJ, NLM_F_DUMP, "NFT_MSG_GETOBJ",
      [&](uint8_t) {
        result.counters.push_back({});
        current = &result.counters.back();
      },
      [&](uint16_t attr, const char* data, size_t len) {
        if (attr == NFTA_OBJ_NAME) current->name = Text(data, len);
        if (attr == NFTA_OBJ_DATA)
          ForEachAttr(data, len, [&](uint16_t item, const char* value, size_t value_len) {
            if (item == NFTA_COUNTER_PACKETS) current->packets = Be64(value, value_len);
            if (item == NFTA_COUNTER_BYTES) current->bytes = Be64(value, value_len);
          });
        return true;
      },
      number, attrs);
  return result;
}

namespace {

// A rule of a chain as the kernel dumps it: what EditElements copies of the marked one.
struct RawRule {
  uint64_t handle = 0;
  std::string expressions;  // NFTA_RULE_EXPRESSIONS' payload
  std::string userdata;     // NFTA_RULE_USERDATA's payload
};

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

// The userdata with its comment replaced by `comment` (NUL-terminated, as nft writes it); the
// other TLVs kept in order.
std::string WithComment(const std::string& userdata, const std::string& comment) {
  std::string out;
  size_t at = 0;
  bool put = false;
  const auto tlv = [&out](uint8_t type, const std::string& value) {
    out.push_back(static_cast<char>(type));
    out.push_back(static_cast<char>(value.size()));
    out += value;
  };
  while (at + 2 <= userdata.size()) {
    const auto type = static_cast<uint8_t>(userdata[at]);
    const auto len = static_cast<uint8_t>(userdata[at + 1]);
    if (at + 2 + len > userdata.size()) break;
    if (type == 0) {
      tlv(0, comment + std::string(1, '\0'));
      put = true;
    } else {
      tlv(type, userdata.substr(at + 2, len));
    }
    at += 2 + len;
  }
  if (!put) tlv(0, comment + std::string(1, '\0'));
  return out;
}

// Appends a DELSETELEM or NEWSETELEM message per kElementsPerMessage elements of `bytes`.
// An interval set's element: its key, and with `end` the flag of an end element; `open` marks a
// start whose range runs to the last address (libnftables' NFTNL_UDATA_SET_ELEM_FLAGS, "open").
void PutIntervalItem(Writer* attrs, const uint8_t* key, size_t key_len, bool end, bool open) {
  size_t item = attrs->Begin(NLA_F_NESTED | NFTA_LIST_ELEM);
  if (end) {
    const uint32_t flags = htonl(NFT_SET_ELEM_INTERVAL_END);
    attrs->Put(NFTA_SET_ELEM_FLAGS, &flags, sizeof(flags));
  }
  size_t at = attrs->Begin(NLA_F_NESTED | NFTA_SET_ELEM_KEY);
  attrs->Put(NFTA_DATA_VALUE, key, key_len);
  attrs->End(at);
  if (open) {
    const uint8_t userdata[] = {1 /* flags */, 4, 1 /* interval open */, 0, 0, 0};
    attrs->Put(NFTA_SET_ELEM_USERDATA, userdata, sizeof(userdata));
  }
  attrs->End(item);
}

// The key one past `last` (big-endian), or false when `last` is the last address.
bool PastLast(const uint8_t* last, size_t len, std::vector<uint8_t>* out) {
  out->assign(last, last + len);
  for (size_t i = len; i-- > 0;) {
    if (++(*out)[i] != 0) return true;
  }
  return false;
}

void PutElements(std::vector<char>* batch, uint16_t type, uint16_t flags, uint8_t family,
                 const std::string& table, const SetEdit& set, const std::vector<uint8_t>& bytes,
                 uint32_t* seq, size_t* acked) {
  const size_t width = 2 * set.key_len;
  const size_t count = width == 0 ? 0 : bytes.size() / width;
  // An interval set's range is up to two items: half as many per message.
  const size_t per_message = set.interval ? kElementsPerMessage / 2 : kElementsPerMessage;
  for (size_t first = 0; first < count; first += per_message) {
    size_t message = StartMessage(batch, static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | type),
                                  static_cast<uint16_t>(flags | NLM_F_ACK), family, (*seq)++, 0);
    (*acked)++;
    Writer attrs(batch);
    attrs.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
    attrs.PutString(NFTA_SET_ELEM_LIST_SET, set.set);
    size_t list = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_LIST_ELEMENTS);
    for (size_t i = first; i < count && i < first + per_message; i++) {
      const uint8_t* element = bytes.data() + i * width;
      if (set.interval) {
        std::vector<uint8_t> past;
        const bool bounded = PastLast(element + set.key_len, set.key_len, &past);
        PutIntervalItem(&attrs, element, set.key_len, false, !bounded);
        if (bounded) PutIntervalItem(&attrs, past.data(), set.key_len, true, false);
        continue;
      }
      size_t item = attrs.Begin(NLA_F_NESTED | NFTA_LIST_ELEM);
      size_t key = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_KEY);
      attrs.Put(NFTA_DATA_VALUE, element, set.key_len);
      attrs.End(key);
      size_t end = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_KEY_END);
      attrs.Put(NFTA_DATA_VALUE, element + set.key_len, set.key_len);
      attrs.End(end);
      attrs.End(item);
    }
    attrs.End(list);
    FinishMessage(batch, message);
  }
}

// A set's flush: a deletion of its elements that names none (what `flush set` sends).
void PutFlush(std::vector<char>* batch, uint8_t family, const std::string& table,
              const std::string& set, uint32_t* seq, size_t* acked) {
  size_t message =
      StartMessage(batch, static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELSETELEM),
                   NLM_F_ACK, family, (*seq)++, 0);
  (*acked)++;
  Writer attrs(batch);
  attrs.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
  attrs.PutString(NFTA_SET_ELEM_LIST_SET, set);
  FinishMessage(batch, message);
}

// libnftables' marker in a plain interval set: an end element at the first address (read off `nft
// --debug=netlink`, 1.0.6 and 1.1.3 alike). Added again where it is already held, it is taken as it
// was (NLM_F_CREATE without NLM_F_EXCL).
void PutMarker(std::vector<char>* batch, uint8_t family, const std::string& table,
               const SetEdit& set, uint32_t* seq, size_t* acked) {
  const std::vector<uint8_t> first(set.key_len, 0);
  size_t message =
      StartMessage(batch, static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM),
                   NLM_F_CREATE | NLM_F_ACK, family, (*seq)++, 0);
  (*acked)++;
  Writer attrs(batch);
  attrs.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
  attrs.PutString(NFTA_SET_ELEM_LIST_SET, set.set);
  size_t list = attrs.Begin(NLA_F_NESTED | NFTA_SET_ELEM_LIST_ELEMENTS);
  PutIntervalItem(&attrs, first.data(), set.key_len, true, false);
  attrs.End(list);
  FinishMessage(batch, message);
}

}  // namespace

// The rule of `table`'s `chain` whose comment is `mark`, as the kernel holds it.
// One chain's rules as the kernel holds them (a NFT_MSG_GETRULE dump filtered to the chain).
static Status ChainRules(uint8_t family, const std::string& table, const std::string& chain,
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

Status FindMarked(const TableEdit& table, RawRule* found) {
  std::vector<RawRule> rules;
  Status listed = ChainRules(table.family, table.table, table.chain, &rules);
  if (!listed.ok) return listed;
  for (const RawRule& rule : rules) {
    if (rule.userdata.empty() || CommentOf(rule.userdata) != table.was_mark) continue;
    *found = rule;
    return {true, ""};
  }
  return {false, "chain " + table.chain + " of table " + table.table +
                     ": no rule carries the mark of the last write"};
}

Status EditElements(const ElementEdit& edit) {
  // The marked rules, as the kernel holds them: found by their comment, the last write's mark.
  std::vector<RawRule> marked(edit.tables.size());
  for (size_t t = 0; t < edit.tables.size(); t++) {
    Status found = FindMarked(edit.tables[t], &marked[t]);
    if (!found.ok) return found;
    if (edit.tables[t].mark.size() > 250) return {false, "the mark is too long for a comment"};
  }
  std::vector<char> batch;
  uint32_t seq = 1;
  size_t begin =
      StartMessage(&batch, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, seq++, NFNL_SUBSYS_NFTABLES);
  if (edit.pinned) {
    Writer attrs(&batch);
    const uint32_t generation = htonl(edit.generation);
    attrs.Put(NFNL_BATCH_GENID, &generation, sizeof(generation));
  }
  FinishMessage(&batch, begin);
  size_t acked = 0;
  for (size_t t = 0; t < edit.tables.size(); t++) {
    const TableEdit& table = edit.tables[t];
    for (const SetEdit& set : table.sets) {
      if (set.refill) PutFlush(&batch, table.family, table.table, set.set, &seq, &acked);
      PutElements(&batch, NFT_MSG_DELSETELEM, 0, table.family, table.table, set, set.removed, &seq,
                  &acked);
    }
    for (const SetEdit& set : table.sets) {
      if (set.interval && set.marker)
        PutMarker(&batch, table.family, table.table, set, &seq, &acked);
      PutElements(&batch, NFT_MSG_NEWSETELEM, NLM_F_CREATE, table.family, table.table, set,
                  set.added, &seq, &acked);
    }
    size_t rule =
        StartMessage(&batch, static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE),
                     NLM_F_REPLACE | NLM_F_ACK, table.family, seq++, 0);
    acked++;
    Writer attrs(&batch);
    attrs.PutString(NFTA_RULE_TABLE, table.table);
    attrs.PutString(NFTA_RULE_CHAIN, table.chain);
    const uint64_t handle = htobe64(marked[t].handle);
    attrs.Put(NFTA_RULE_HANDLE, &handle, sizeof(handle));
    attrs.Put(NLA_F_NESTED | NFTA_RULE_EXPRESSIONS, marked[t].expressions.data(),
              marked[t].expressions.size());
    const std::string userdata = WithComment(marked[t].userdata, table.mark);
    attrs.Put(NFTA_RULE_USERDATA, userdata.data(), userdata.size());
    FinishMessage(&batch, rule);
  }
  FinishMessage(
      &batch, StartMessage(&batch, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, seq++, NFNL_SUBSYS_NFTABLES));
  return SendBatch(batch, acked, "our tables");
}

SetElements ReadSetElements(uint8_t family, const std::string& table, const std::string& set,
                            size_t key_len, bool interval) {
  SetElements result{{true, ""}, {}};
  if (key_len == 0 || key_len > 64) return {{false, "a key is 1 to 64 bytes"}, {}};
  std::vector<char> attrs;
  Writer writer(&attrs);
  writer.PutString(NFTA_SET_ELEM_LIST_TABLE, table);
  writer.PutString(NFTA_SET_ELEM_LIST_SET, set);
  // Each item as the kernel lists it, in one flat run of fixed-width records: its key, then its
  // end key (concatenated range sets) or a byte saying whether it is an end item (interval sets).
  const size_t width = interval ? key_len + 1 : 2 * key_len;
  std::vector<uint8_t> items;
  bool malformed = false;
  const auto value_into = [&](const char* data, size_t len, size_t at) {
    bool found = false;
    ForEachAttr(data, len, [&](uint16_t type, const char* payload, size_t payload_len) {
      if (type != NFTA_DATA_VALUE) return;
      found = payload_len == key_len;
      if (found) memcpy(items.data() + at, payload, key_len);
    });
    if (!found) malformed = true;
  };
  result.status = NetlinkRequest(
      NFT_MSG_GETSETELEM, NLM_F_DUMP, "NFT_MSG_GETSETELEM", [](uint8_t) {},
      [&](uint16_t type, const char* data, size_t len) {
        if (type != NFTA_SET_ELEM_LIST_ELEMENTS) return true;
        ForEachAttr(data, len, [&](uint16_t elem, const char* element, size_t element_len) {
          if (elem != NFTA_LIST_ELEM) return;
          const size_t at = items.size();
          items.resize(at + width, 0);
          bool has_end = false;
          ForEachAttr(element, element_len,
                      [&](uint16_t attr, const char* value, size_t value_len) {
                        if (attr == NFTA_SET_ELEM_KEY) value_into(value, value_len, at);
                        if (attr == NFTA_SET_ELEM_KEY_END && !interval) {
                          value_into(value, value_len, at + key_len);
                          has_end = true;
                        }
                        if (attr == NFTA_SET_ELEM_FLAGS && interval)
                          items[at + key_len] =
                              (Be32(value, value_len) & NFT_SET_ELEM_INTERVAL_END) ? 1 : 0;
                      });
          if (!interval && !has_end) malformed = true;
        });
        return true;
      },
      family, attrs);
  if (!result.status.ok) return result;
  if (malformed)
    return {{false, "set " + set + " of table " + table + ": an element of an unexpected shape"},
            {}};
  const size_t count = items.size() / width;
  // Sorted by key (the kernel lists some sets backwards); an interval set's end item before a
  // start item of the same key (adjoining ranges share it): its flag byte inverted in the order.
  const auto before = [&](size_t a, size_t b) {
    const uint8_t* x = items.data() + a * width;
    const uint8_t* y = items.data() + b * width;
    const int by_key = memcmp(x, y, key_len);
    if (by_key != 0 || !interval) return by_key < 0 || (by_key == 0 && memcmp(x, y, width) < 0);
    return x[key_len] > y[key_len];
  };
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; i++) order[i] = i;
  if (!std::is_sorted(order.begin(), order.end(), before))
    std::sort(order.begin(), order.end(), before);
  result.elements.reserve(count * 2 * key_len);
  if (!interval) {
    for (size_t i : order)
      result.elements.insert(result.elements.end(), items.data() + i * width,
                             items.data() + (i + 1) * width);
    return result;
  }
  const auto key_of = [&](size_t n) { return items.data() + order[n] * width; };
  const auto is_end = [&](size_t n) { return key_of(n)[key_len] != 0; };
  for (size_t n = 0; n < count; n++) {
    const uint8_t* start = key_of(n);
    // libnftables closes the gap below the first range with an end item at key 0 (and puts one
    // alone in an empty set): no range of its own.
    if (is_end(n) && n == 0 &&
        std::all_of(start, start + key_len, [](uint8_t b) { return b == 0; }))
      continue;
    if (is_end(n))
      return {{false, "set " + set + " of table " + table + ": an end item without its start"}, {}};
    uint8_t last[64];
    memset(last, 0xff, key_len);
    if (n + 1 < count && is_end(n + 1)) {
      // One before the end item's key: the range's last key.
      memcpy(last, key_of(++n), key_len);
      for (size_t b = key_len; b-- > 0;) {
        if (last[b]-- != 0) break;
      }
    }
    result.elements.insert(result.elements.end(), start, start + key_len);
    result.elements.insert(result.elements.end(), last, last + key_len);
  }
  return result;
}

Comments RuleComments(uint8_t family, const std::string& table, const std::string& chain) {
  std::vector<RawRule> rules;
  Comments result{ChainRules(family, table, chain, &rules), {}};
  for (const RawRule& rule : rules) result.comments.push_back(CommentOf(rule.userdata));
  return result;
}

}  // namespace netlink

namespace netlink {
namespace {

// Tables named by the messages of a commit not yet ended by its NEWGEN, per monitor socket.
struct OpenCommit {
  std::set<std::string> tables;
  bool capped = false;
  // The socket was deaf for a while (MuteMonitor): the next drain says notifications were lost.
  bool missed = false;
};
std::map<int, OpenCommit>& OpenCommits() {
  static std::map<int, OpenCommit> open;
  return open;
}

// The most table names one commit keeps; a commit naming more is marked capped, which the reader
// takes as naming every table (ours too).
constexpr size_t kMaxCommitTables = 4096;

// Each message's first attribute type, 1, is its table's name for every object kind: tables
// (NFTA_TABLE_NAME), chains, rules, sets, elements, objects and flowtables (NFTA_*_TABLE).
constexpr uint16_t kTableAttr = 1;

}  // namespace

Monitor OpenMonitor() {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
  if (fd < 0) return {{false, std::string("netlink socket: ") + strerror(errno)}, -1};
  // Room for a large commit's notifications (an element each: a whole write of 100 000 CIDRs
  // is ~10 MiB of them); past it the kernel drops them and says so (ENOBUFS), which the reader
  // treats as "anything may have changed". A limit, not memory taken while the socket is drained.
  int size = 32 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = 1u << (NFNLGRP_NFTABLES - 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) < 0) {
    std::string error = std::string("netlink bind: ") + strerror(errno);
    later::Close(fd);
    return {{false, error}, -1};
  }
  OpenCommits()[fd];
  return {{true, ""}, fd};
}

Heard DrainMonitor(int fd) {
  Heard heard{{true, ""}, {}, false};
  auto found = OpenCommits().find(fd);
  if (found == OpenCommits().end()) return {{false, "not a monitor socket"}, {}, false};
  OpenCommit& open = found->second;
  heard.overflow = open.missed;
  open.missed = false;
  alignas(nlmsghdr) static thread_local char buf[65536];
  for (;;) {
    // MSG_TRUNC: the datagram's whole length, so that one longer than the buffer is known cut.
    ssize_t len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
    if (len < 0 && errno == EINTR) continue;
    if ((len < 0 && errno == ENOBUFS) || len > static_cast<ssize_t>(sizeof(buf))) {
      heard.overflow = true;
      // What was dropped may have been the start of the commit whose end comes next: its tables
      // are not known, so it counts as naming ours (docs/writes.md, "Beside a busy node").
      open = OpenCommit{};
      open.capped = true;
      continue;
    }
    if (len < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (len < 0) return {{false, std::string("netlink recv: ") + strerror(errno)}, {}, false};
    if (len == 0) break;
    for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nlh, len);
         nlh = NLMSG_NEXT(nlh, len)) {
      if ((nlh->nlmsg_type >> 8) != NFNL_SUBSYS_NFTABLES) continue;
      if (nlh->nlmsg_len < NLMSG_SPACE(sizeof(nfgenmsg))) continue;
      const uint16_t type = nlh->nlmsg_type & 0xff;
      const uint8_t family = static_cast<nfgenmsg*>(NLMSG_DATA(nlh))->nfgen_family;
      const char* attrs = static_cast<char*>(NLMSG_DATA(nlh)) + NLMSG_ALIGN(sizeof(nfgenmsg));
      const size_t attrs_len = nlh->nlmsg_len - NLMSG_SPACE(sizeof(nfgenmsg));
      if (type == NFT_MSG_NEWGEN) {
        Commit commit;
        ForEachAttr(attrs, attrs_len, [&](uint16_t attr, const char* data, size_t size) {
          if (attr == NFTA_GEN_ID) commit.gen_id = Be32(data, size);
        });
        commit.tables.assign(open.tables.begin(), open.tables.end());
        commit.capped = open.capped;
        open = OpenCommit{};
        heard.commits.push_back(std::move(commit));
        continue;
      }
      std::string table;
      ForEachAttr(attrs, attrs_len, [&](uint16_t attr, const char* data, size_t size) {
        if (attr == kTableAttr && table.empty()) table = Text(data, size);
      });
      if (table.empty()) continue;
      std::string named = std::string(FamilyName(family)) + " " + table;
      if (open.tables.size() < kMaxCommitTables || open.tables.count(named) > 0)
        open.tables.insert(std::move(named));
      else
        open.capped = true;
    }
    // A header left whose message does not fit: cut short, what it named is not known.
    if (len >= static_cast<ssize_t>(sizeof(nlmsghdr))) {
      heard.overflow = true;
      open = OpenCommit{};
      open.capped = true;
    }
  }
  return heard;
}

Status MuteMonitor(int fd, bool mute) {
  auto found = OpenCommits().find(fd);
  if (found == OpenCommits().end()) return {false, "not a monitor socket"};
  int group = NFNLGRP_NFTABLES;
  if (setsockopt(fd, SOL_NETLINK, mute ? NETLINK_DROP_MEMBERSHIP : NETLINK_ADD_MEMBERSHIP, &group,
                 sizeof(group)) < 0)
    return {false, std::string("netlink membership: ") + strerror(errno)};
  // Whatever was committed meanwhile went unheard: said once, at the next drain. (A commit whose
  // end went unheard leaves its tables to the next one heard, which then names them too.)
  if (!mute) found->second.missed = true;
  return {true, ""};
}

void CloseMonitor(int fd) {
  if (OpenCommits().erase(fd) > 0) later::Close(fd);
}

}  // namespace netlink

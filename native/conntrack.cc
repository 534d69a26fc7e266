// See conntrack.h. Entries are judged during the dump and deleted later, on another handle: a
// netlink socket cannot take requests while it is answering a dump.
#include "conntrack.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "route.h"

namespace conntrack {
namespace {

constexpr uint8_t kUdp = IPPROTO_UDP;
constexpr uint8_t kUdpLite = 136;

bool InRange(const Range& range, const uint8_t* address, size_t width) {
  return memcmp(address, range.first.data(), width) >= 0 &&
         memcmp(address, range.last.data(), width) <= 0;
}

// What a config decides for one flow: left alone, masqueraded, or translated to its snat range.
struct Decision {
  enum Kind { kUntouched, kMasquerade, kSnat } kind = kUntouched;
  const Range* snat = nullptr;
};

bool Same(const Decision& a, const Decision& b, size_t width) {
  if (a.kind != b.kind) return false;
  if (a.kind != Decision::kSnat) return true;
  return memcmp(a.snat->first.data(), b.snat->first.data(), width) == 0 &&
         memcmp(a.snat->last.data(), b.snat->last.data(), width) == 0;
}

Decision Translated(const Policy& policy) {
  return policy.snat ? Decision{Decision::kSnat, &policy.snat_range}
                     : Decision{Decision::kMasquerade, nullptr};
}

bool Listed(const Policy& policy, const std::string& name) {
  if (policy.any_interface) return true;
  return std::any_of(policy.interfaces.begin(), policy.interfaces.end(), [&](const auto& entry) {
    if (!entry.empty() && entry.back() == '*')
      return name.compare(0, entry.size() - 1, entry, 0, entry.size() - 1) == 0;
    return name == entry;
  });
}

// Whether the entry carries the decision: no translation, or one to the decision's target. A
// masquerade is told from a SNAT to the other decision's range by the address translated to.
bool Carries(const Decision& decision, const Decision& other, bool translated,
             const uint8_t* translated_to, size_t width) {
  switch (decision.kind) {
    case Decision::kUntouched:
      return !translated;
    case Decision::kSnat:
      return translated && InRange(*decision.snat, translated_to, width);
    case Decision::kMasquerade:
      return translated &&
             !(other.kind == Decision::kSnat && InRange(*other.snat, translated_to, width));
  }
  return false;
}

struct HeldReply {
  ReplyTuple tuple;
  uint32_t timeout;  // seconds the entry had left: the higher, the more recently it was active
};

struct DumpContext {
  const JudgeRequest* request;
  size_t width;  // address bytes: 4 or 16
  route::Resolver* routes;
  Plan* plan;
  std::vector<HeldReply> held;
};

int OnEntry(nf_conntrack* ct, void* data) {
  auto* context = static_cast<DumpContext*>(data);
  const JudgeRequest& request = *context->request;
  const size_t width = context->width;
  context->plan->seen++;
  const uint8_t protocol = nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO);
  if (!request.protocols.empty() && std::find(request.protocols.begin(), request.protocols.end(),
                                              protocol) == request.protocols.end())
    return NFCT_CB_CONTINUE;
  const bool v4 = request.family == AF_INET;
  // The destination the postrouting decision was made on (after DNAT) is the reply's source.
  const auto* destination =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_SRC : ATTR_REPL_IPV6_SRC));
  const auto* source =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_ORIG_IPV4_SRC : ATTR_ORIG_IPV6_SRC));
  const auto* translated_to =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_DST : ATTR_REPL_IPV6_DST));
  if (destination == nullptr || source == nullptr || translated_to == nullptr)
    return NFCT_CB_CONTINUE;
  const bool lost = InRanges(request.lost, destination, width);
  const bool gained = InRanges(request.gained, destination, width);
  if (!request.policy_changed && !lost && !gained) return NFCT_CB_CONTINUE;
  const bool exempt_after =
      request.policy_changed ? InRanges(request.exempt_after, destination, width) : gained;
  const bool exempt_before = lost || (exempt_after && !gained);

  // Each config's decision with its interface step passed; the interface is looked up only when
  // it can change the outcome.
  auto decide = [&](const Policy& policy, bool exempt) {
    const bool considered = policy.any_source || InRanges(policy.sources, source, width);
    return exempt || !considered ? Decision{} : Translated(policy);
  };
  Decision before = decide(request.before, exempt_before);
  Decision after = decide(request.after, exempt_after);
  const bool by_interface = !request.before.any_interface || !request.after.any_interface;
  if (by_interface) {
    if (before.kind == Decision::kUntouched && after.kind == Decision::kUntouched)
      return NFCT_CB_CONTINUE;
    const bool same_lists = request.before.any_interface == request.after.any_interface &&
                            request.before.interfaces == request.after.interfaces;
    if (same_lists && Same(before, after, width)) return NFCT_CB_CONTINUE;
  } else if (Same(before, after, width)) {
    return NFCT_CB_CONTINUE;
  }
  // A flow to a local address never reaches the decision chain (its jump's `fib` test).
  if (context->routes->Local(destination)) return NFCT_CB_CONTINUE;
  if (by_interface) {
    const std::string egress = context->routes->Egress(source, destination);
    if (egress.empty()) {
      context->plan->unjudged++;
      return NFCT_CB_CONTINUE;
    }
    if (!Listed(request.before, egress)) before = Decision{};
    if (!Listed(request.after, egress)) after = Decision{};
    if (Same(before, after, width)) return NFCT_CB_CONTINUE;
  }
  // Only an entry that still carries the old decision: one made since the change carries the new
  // one, and one another tool translated carries neither.
  const uint32_t status = nfct_get_attr_u32(ct, ATTR_STATUS);
  const bool translated = (status & IPS_SRC_NAT) != 0;
  if (!Carries(before, after, translated, translated_to, width) ||
      Carries(after, before, translated, translated_to, width))
    return NFCT_CB_CONTINUE;

  nf_conntrack* copy = nfct_clone(ct);
  if (copy == nullptr) return NFCT_CB_CONTINUE;
  const bool udp = protocol == kUdp || protocol == kUdpLite;
  if (translated && udp && (status & IPS_SEEN_REPLY) == 0) {
    context->plan->later.push_back(copy);
    return NFCT_CB_CONTINUE;
  }
  context->plan->now.push_back(copy);
  if (!translated && protocol == kUdp) {
    HeldReply reply;
    memcpy(reply.tuple.source.data(), destination, width);
    memcpy(reply.tuple.destination.data(), translated_to, width);
    reply.tuple.source_port = ntohs(nfct_get_attr_u16(ct, ATTR_REPL_PORT_SRC));
    reply.tuple.destination_port = ntohs(nfct_get_attr_u16(ct, ATTR_REPL_PORT_DST));
    reply.timeout = nfct_attr_is_set(ct, ATTR_TIMEOUT) ? nfct_get_attr_u32(ct, ATTR_TIMEOUT) : 0;
    context->held.push_back(reply);
  }
  return NFCT_CB_CONTINUE;
}

struct HandleCloser {
  void operator()(nfct_handle* handle) const { nfct_close(handle); }
};
using Handle = std::unique_ptr<nfct_handle, HandleCloser>;

// The kernel has no conntrack, or the namespace none to dump: nothing to judge or count.
bool NothingThere(int err) {
  return err == ENOENT || err == EOPNOTSUPP || err == EPROTONOSUPPORT || err == EAFNOSUPPORT;
}

struct Relay {
  EntryCallback on_entry;
  void* data;
};

int Relayed(enum nf_conntrack_msg_type, nf_conntrack* ct, void* data) {
  const auto* relay = static_cast<Relay*>(data);
  return relay->on_entry(ct, relay->data);
}

// One IPCTNL_MSG_CT_DELETE for the entry's tuple and zone as the library builds them, and its id:
// the library's own destroy query leaves the id out, and the kernel then deletes whatever entry
// has the tuple now.
int DeleteOne(int fd, nf_conntrack* ct, uint32_t seq) {
  alignas(nlmsghdr) char buffer[8192] = {};
  auto* header = reinterpret_cast<nlmsghdr*>(buffer);
  header->nlmsg_len = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
  header->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
  header->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  header->nlmsg_seq = seq;
  auto* nfg = reinterpret_cast<nfgenmsg*>(buffer + NLMSG_HDRLEN);
  nfg->nfgen_family = nfct_get_attr_u8(ct, ATTR_L3PROTO);
  nfg->version = NFNETLINK_V0;
  if (nfct_nlmsg_build(header, ct) < 0) return errno != 0 ? errno : EINVAL;
  if (nfct_attr_is_set(ct, ATTR_ID)) {
    const size_t at = NLMSG_ALIGN(header->nlmsg_len);
    if (at + NLA_HDRLEN + sizeof(uint32_t) > sizeof(buffer)) return EMSGSIZE;
    auto* attr = reinterpret_cast<nlattr*>(buffer + at);
    attr->nla_type = CTA_ID;
    attr->nla_len = NLA_HDRLEN + sizeof(uint32_t);
    const uint32_t id = htonl(nfct_get_attr_u32(ct, ATTR_ID));
    memcpy(buffer + at + NLA_HDRLEN, &id, sizeof(id));
    header->nlmsg_len = static_cast<uint32_t>(at + NLA_ALIGN(attr->nla_len));
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, buffer, header->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
             sizeof(kernel)) < 0)
    return errno;
  alignas(nlmsghdr) char answer[4096];
  for (;;) {
    ssize_t length = recv(fd, answer, sizeof(answer), 0);
    if (length < 0 && errno == EINTR) continue;
    if (length < 0) return errno;
    int left = static_cast<int>(length);
    for (auto* message = reinterpret_cast<nlmsghdr*>(answer); NLMSG_OK(message, left);
         message = NLMSG_NEXT(message, left)) {
      if (message->nlmsg_seq != seq || message->nlmsg_type != NLMSG_ERROR) continue;
      return -static_cast<nlmsgerr*>(NLMSG_DATA(message))->error;
    }
  }
}

}  // namespace

Plan::~Plan() {
  for (nf_conntrack* ct : now) nfct_destroy(ct);
  for (nf_conntrack* ct : later) nfct_destroy(ct);
}

bool InRanges(const std::vector<Range>& ranges, const uint8_t* address, size_t width) {
  // The last range whose first address is not above `address`, then whether it reaches it.
  auto after = std::upper_bound(
      ranges.begin(), ranges.end(), address,
      [width](const uint8_t* a, const Range& r) { return memcmp(a, r.first.data(), width) < 0; });
  if (after == ranges.begin()) return false;
  return memcmp(address, std::prev(after)->last.data(), width) <= 0;
}

DumpEnd Dump(uint8_t family, bool source_translated_only, EntryCallback on_entry, void* data) {
  Handle handle(nfct_open(CONNTRACK, 0));
  if (!handle) {
    if (NothingThere(errno)) return {};
    return {false, std::string("nfct_open: ") + strerror(errno)};
  }
  timeval limit{10, 0};
  setsockopt(nfct_fd(handle.get()), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  Relay relay{on_entry, data};
  nfct_callback_register(handle.get(), NFCT_T_ALL, Relayed, &relay);
  std::unique_ptr<nfct_filter_dump, void (*)(nfct_filter_dump*)> filter(nfct_filter_dump_create(),
                                                                        nfct_filter_dump_destroy);
  if (!filter) return {false, "nfct_filter_dump_create: out of memory"};
  nfct_filter_dump_set_attr_u8(filter.get(), NFCT_FILTER_DUMP_L3NUM, family);
  nfct_filter_dump_mark status{IPS_SRC_NAT, IPS_SRC_NAT};
  if (source_translated_only)
    nfct_filter_dump_set_attr(filter.get(), NFCT_FILTER_DUMP_STATUS, &status);
  const int dumped = nfct_query(handle.get(), NFCT_Q_DUMP_FILTER, filter.get());
  const int dump_errno = errno;
  if (dumped < 0 && !NothingThere(dump_errno))
    return {false, std::string("dump: ") + strerror(dump_errno)};
  return {};
}

JudgeResult Judge(const JudgeRequest& request) {
  JudgeResult result;
  result.plan = std::make_shared<Plan>();
  route::Resolver routes(request.family);
  DumpContext context{
      &request, request.family == AF_INET ? 4u : 16u, &routes, result.plan.get(), {}};
  const DumpEnd end = Dump(request.family, false, OnEntry, &context);
  // Half a dump is no ground to delete anything on.
  if (!end.ok) return {false, end.error, nullptr};
  std::stable_sort(context.held.begin(), context.held.end(),
                   [](const HeldReply& a, const HeldReply& b) { return a.timeout > b.timeout; });
  if (context.held.size() > request.hold_max) context.held.resize(request.hold_max);
  for (const auto& reply : context.held) result.plan->hold.push_back(reply.tuple);
  return result;
}

DeleteResult Delete(const std::vector<nf_conntrack*>& entries) {
  DeleteResult result;
  if (entries.empty()) return result;
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno), {}};
  timeval limit{10, 0};  // a kernel that stops answering must not hold the pool thread for good
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::map<uint8_t, uint64_t> deleted;
  uint32_t seq = 0;
  for (nf_conntrack* ct : entries) {
    // ENOENT: the entry ended since, or another one now has its addresses: what was wanted.
    const int err = DeleteOne(fd, ct, ++seq);
    if (err == 0)
      deleted[nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO)]++;
    else if (err != ENOENT && result.ok)
      result = {false, std::string("delete: ") + strerror(err), {}};
  }
  close(fd);
  result.deleted.assign(deleted.begin(), deleted.end());
  return result;
}

}  // namespace conntrack

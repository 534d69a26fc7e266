// See conntrack.h. Entries are matched during the dump and deleted after it, on a second handle: a
// netlink socket cannot take requests while it is answering a dump.
#include "conntrack.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

namespace conntrack {
namespace {

struct DumpContext {
  const FlushRequest* request;
  size_t width;  // address bytes: 4 or 16
  std::vector<nf_conntrack*> matched;
  std::vector<ReplyTuple> replies;
  uint64_t seen = 0;
};

bool InRanges(const std::vector<Range>& ranges, const uint8_t* address, size_t width) {
  // The last range whose first address is not above `address`, then whether it reaches it.
  auto after = std::upper_bound(
      ranges.begin(), ranges.end(), address,
      [width](const uint8_t* a, const Range& r) { return memcmp(a, r.first.data(), width) < 0; });
  if (after == ranges.begin()) return false;
  return memcmp(address, std::prev(after)->last.data(), width) <= 0;
}

int OnEntry(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* data) {
  auto* context = static_cast<DumpContext*>(data);
  context->seen++;
  const FlushRequest& request = *context->request;
  uint8_t protocol = nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO);
  if (!request.protocols.empty() && std::find(request.protocols.begin(), request.protocols.end(),
                                              protocol) == request.protocols.end())
    return NFCT_CB_CONTINUE;
  bool v4 = request.family == AF_INET;
  const void* source = nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_SRC : ATTR_REPL_IPV6_SRC);
  if (source == nullptr ||
      !InRanges(request.ranges, static_cast<const uint8_t*>(source), context->width))
    return NFCT_CB_CONTINUE;
  if (!request.sources.empty()) {
    const void* sender = nfct_get_attr(ct, v4 ? ATTR_ORIG_IPV4_SRC : ATTR_ORIG_IPV6_SRC);
    if (sender == nullptr ||
        !InRanges(request.sources, static_cast<const uint8_t*>(sender), context->width))
      return NFCT_CB_CONTINUE;
  }
  uint32_t status = nfct_get_attr_u32(ct, ATTR_STATUS);
  if (request.translated_only && (status & IPS_SRC_NAT) == 0) return NFCT_CB_CONTINUE;
  if (request.list_only) {
    const void* destination = nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_DST : ATTR_REPL_IPV6_DST);
    if (protocol == IPPROTO_UDP && (status & IPS_SRC_NAT) == 0 && destination != nullptr) {
      ReplyTuple tuple;
      memcpy(tuple.source.data(), source, context->width);
      memcpy(tuple.destination.data(), destination, context->width);
      tuple.source_port = ntohs(nfct_get_attr_u16(ct, ATTR_REPL_PORT_SRC));
      tuple.destination_port = ntohs(nfct_get_attr_u16(ct, ATTR_REPL_PORT_DST));
      context->replies.push_back(tuple);
    }
    return NFCT_CB_CONTINUE;
  }
  nf_conntrack* copy = nfct_clone(ct);
  if (copy != nullptr) context->matched.push_back(copy);
  return NFCT_CB_CONTINUE;
}

struct HandleCloser {
  void operator()(nfct_handle* handle) const { nfct_close(handle); }
};
using Handle = std::unique_ptr<nfct_handle, HandleCloser>;

// A reply that never comes must not hold the pool thread (and the agent's sync) for good.
Handle Open() {
  Handle handle(nfct_open(CONNTRACK, 0));
  if (handle) {
    timeval limit{10, 0};
    setsockopt(nfct_fd(handle.get()), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  return handle;
}

// The kernel has no conntrack, or the namespace none to dump: nothing to delete.
bool NothingThere(int err) {
  return err == ENOENT || err == EOPNOTSUPP || err == EPROTONOSUPPORT || err == EAFNOSUPPORT;
}

}  // namespace

FlushResult Flush(const FlushRequest& request) {
  FlushResult result;
  if (request.ranges.empty()) return result;
  Handle dump = Open();
  if (!dump) {
    if (NothingThere(errno)) return result;
    return {false, std::string("nfct_open: ") + strerror(errno), {}, 0, {}};
  }
  DumpContext context{&request, request.family == AF_INET ? 4u : 16u, {}, {}, 0};
  nfct_callback_register(dump.get(), NFCT_T_ALL, OnEntry, &context);
  std::unique_ptr<nfct_filter_dump, void (*)(nfct_filter_dump*)> filter(nfct_filter_dump_create(),
                                                                        nfct_filter_dump_destroy);
  if (!filter) return {false, "nfct_filter_dump_create: out of memory", {}, 0, {}};
  nfct_filter_dump_set_attr_u8(filter.get(), NFCT_FILTER_DUMP_L3NUM, request.family);
  int dumped = nfct_query(dump.get(), NFCT_Q_DUMP_FILTER, filter.get());
  int dump_errno = errno;
  result.seen = context.seen;
  result.replies = std::move(context.replies);
  std::map<uint8_t, uint64_t> deleted;
  std::string error;
  if (dumped < 0 && !NothingThere(dump_errno)) error = std::string("dump: ") + strerror(dump_errno);
  if (error.empty() && !context.matched.empty()) {
    Handle destroy = Open();
    if (!destroy) error = std::string("nfct_open: ") + strerror(errno);
    for (nf_conntrack* ct : context.matched) {
      if (!destroy) break;
      // ENOENT: the entry ended between the dump and now, which is what was wanted.
      if (nfct_query(destroy.get(), NFCT_Q_DESTROY, ct) == 0)
        deleted[nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO)]++;
      else if (errno != ENOENT && error.empty())
        error = std::string("delete: ") + strerror(errno);
    }
  }
  for (nf_conntrack* ct : context.matched) nfct_destroy(ct);
  result.deleted.assign(deleted.begin(), deleted.end());
  if (!error.empty()) {
    result.ok = false;
    result.error = error;
  }
  return result;
}

}  // namespace conntrack

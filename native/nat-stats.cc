// See nat-stats.h. The busiest (translated address, destination, port) is counted exactly in an
// open-addressing table of fixed-size keys (16 bytes a slot for IPv4, 40 for IPv6) that grows with
// the number of distinct keys, not of entries.
#include "nat-stats.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

namespace natstats {
namespace {

Result Failure(std::string error) {
  Result result;
  result.ok = false;
  result.error = std::move(error);
  return result;
}

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

bool InRanges(const std::vector<conntrack::Range>& ranges, const uint8_t* address, size_t width) {
  if (ranges.empty()) return true;
  return std::any_of(ranges.begin(), ranges.end(), [&](const conntrack::Range& r) {
    return memcmp(address, r.first.data(), width) >= 0 &&
           memcmp(address, r.last.data(), width) <= 0;
  });
}

// Counts by key: keys of `key_size` bytes, in slots of the key and a 32-bit count (0: empty).
class CountTable {
 public:
  explicit CountTable(size_t key_size) : key_size_(key_size), slot_size_(key_size + 4) {
    Resize(1024);
  }

  // Adds one to the key's count; returns the new count.
  uint32_t Add(const uint8_t* key) {
    if ((used_ + 1) * 10 > capacity_ * 7) Resize(capacity_ * 2);
    uint8_t* slot = Find(key);
    uint32_t count;
    memcpy(&count, slot + key_size_, 4);
    if (count == 0) {
      memcpy(slot, key, key_size_);
      used_++;
    }
    count++;
    memcpy(slot + key_size_, &count, 4);
    return count;
  }

  uint32_t Get(const uint8_t* key) const {
    const uint8_t* slot = Find(key);
    uint32_t count;
    memcpy(&count, slot + key_size_, 4);
    return count;
  }

 private:
  uint64_t Hash(const uint8_t* key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < key_size_; i++) h = (h ^ key[i]) * 1099511628211ull;
    return h ^ (h >> 29);
  }

  uint8_t* Find(const uint8_t* key) const {
    size_t at = Hash(key) & (capacity_ - 1);
    for (;;) {
      uint8_t* slot = const_cast<uint8_t*>(slots_.data()) + at * slot_size_;
      uint32_t count;
      memcpy(&count, slot + key_size_, 4);
      if (count == 0 || memcmp(slot, key, key_size_) == 0) return slot;
      at = (at + 1) & (capacity_ - 1);
    }
  }

  void Resize(size_t capacity) {
    std::vector<uint8_t> old;
    old.swap(slots_);
    const size_t old_capacity = capacity_;
    capacity_ = capacity;
    slots_.assign(capacity_ * slot_size_, 0);
    used_ = 0;
    for (size_t i = 0; i < old_capacity; i++) {
      const uint8_t* slot = old.data() + i * slot_size_;
      uint32_t count;
      memcpy(&count, slot + key_size_, 4);
      if (count == 0) continue;
      uint8_t* to = Find(slot);
      memcpy(to, slot, slot_size_);
      used_++;
    }
  }

  size_t key_size_;
  size_t slot_size_;
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::vector<uint8_t> slots_;
};

struct GroupValue {
  uint64_t flows = 0;
  std::vector<Address> translated;
};

struct Context {
  const Request* request;
  size_t width;
  double started;
  Result* result;
  CountTable busiest_keys;
  std::unordered_map<std::string, GroupValue> groups;
};

int OnEntry(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* data) {
  auto* context = static_cast<Context*>(data);
  Result& result = *context->result;
  if ((++result.seen & 1023) == 0 &&
      ThreadCpuSeconds() - context->started > context->request->cpu_budget_s) {
    result.complete = false;
    return NFCT_CB_STOP;
  }
  if ((nfct_get_attr_u32(ct, ATTR_STATUS) & IPS_SRC_NAT) == 0) return NFCT_CB_CONTINUE;
  const bool v4 = context->request->family == AF_INET;
  const size_t width = context->width;
  const auto* source =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_ORIG_IPV4_SRC : ATTR_ORIG_IPV6_SRC));
  // The destination after DNAT (the reply's source), and the address translated to (the reply's
  // destination).
  const auto* destination =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_SRC : ATTR_REPL_IPV6_SRC));
  const auto* translated =
      static_cast<const uint8_t*>(nfct_get_attr(ct, v4 ? ATTR_REPL_IPV4_DST : ATTR_REPL_IPV6_DST));
  if (source == nullptr || destination == nullptr || translated == nullptr) return NFCT_CB_CONTINUE;
  if (!InRanges(context->request->from, source, width) ||
      !InRanges(context->request->to, destination, width))
    return NFCT_CB_CONTINUE;
  const uint8_t protocol = nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO);
  const uint16_t port = nfct_attr_is_set(ct, ATTR_REPL_PORT_SRC)
                            ? ntohs(nfct_get_attr_u16(ct, ATTR_REPL_PORT_SRC))
                            : 0;
  result.translated++;
  // Key: translated address, destination, port (network order), protocol.
  uint8_t key[2 * 16 + 3];
  memcpy(key, translated, width);
  memcpy(key + width, destination, width);
  key[2 * width] = static_cast<uint8_t>(port >> 8);
  key[2 * width + 1] = static_cast<uint8_t>(port & 0xff);
  key[2 * width + 2] = protocol;
  const uint32_t count = context->busiest_keys.Add(key);
  Protocol& figures = result.protocols[protocol];
  figures.flows++;
  figures.busiest = std::max<uint64_t>(figures.busiest, count);
  if (context->request->by_source) {
    std::string group(reinterpret_cast<const char*>(source), width);
    group.append(reinterpret_cast<const char*>(key + width), width + 3);
    GroupValue& value = context->groups[group];
    value.flows++;
    Address to{};
    memcpy(to.data(), translated, width);
    if (value.translated.size() < kTranslatedKept &&
        std::find(value.translated.begin(), value.translated.end(), to) == value.translated.end())
      value.translated.push_back(to);
  }
  return NFCT_CB_CONTINUE;
}

bool NothingThere(int err) {
  return err == ENOENT || err == EOPNOTSUPP || err == EPROTONOSUPPORT || err == EAFNOSUPPORT;
}

}  // namespace

Result Sample(const Request& request) {
  Result result;
  const size_t width = request.family == AF_INET ? 4 : 16;
  Context context{&request, width, ThreadCpuSeconds(), &result, CountTable(2 * width + 3), {}};
  std::unique_ptr<nfct_handle, int (*)(nfct_handle*)> handle(nfct_open(CONNTRACK, 0), nfct_close);
  if (!handle) {
    if (NothingThere(errno)) return result;
    return Failure(std::string("nfct_open: ") + strerror(errno));
  }
  timeval limit{10, 0};  // a kernel that stops answering must not hold the pool thread for good
  setsockopt(nfct_fd(handle.get()), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  nfct_callback_register(handle.get(), NFCT_T_ALL, OnEntry, &context);
  std::unique_ptr<nfct_filter_dump, void (*)(nfct_filter_dump*)> filter(nfct_filter_dump_create(),
                                                                        nfct_filter_dump_destroy);
  if (!filter) return Failure("nfct_filter_dump_create: out of memory");
  nfct_filter_dump_set_attr_u8(filter.get(), NFCT_FILTER_DUMP_L3NUM, request.family);
  // Only source-translated entries, where the kernel filters by status (Linux 5.19 and later);
  // OnEntry checks the status again for a kernel that ignores it.
  nfct_filter_dump_mark status{IPS_SRC_NAT, IPS_SRC_NAT};
  nfct_filter_dump_set_attr(filter.get(), NFCT_FILTER_DUMP_STATUS, &status);
  int dumped = nfct_query(handle.get(), NFCT_Q_DUMP_FILTER, filter.get());
  int dump_errno = errno;
  result.cpu_s = ThreadCpuSeconds() - context.started;
  if (dumped < 0 && result.complete && !NothingThere(dump_errno))
    return Failure(std::string("dump: ") + strerror(dump_errno));
  if (request.by_source) {
    result.groups.reserve(context.groups.size());
    for (auto& [key, value] : context.groups) {
      Group group;
      const auto* bytes = reinterpret_cast<const uint8_t*>(key.data());
      memcpy(group.source.data(), bytes, width);
      memcpy(group.destination.data(), bytes + width, width);
      group.port = static_cast<uint16_t>((bytes[2 * width] << 8) | bytes[2 * width + 1]);
      group.protocol = bytes[2 * width + 2];
      group.flows = value.flows;
      group.translated = std::move(value.translated);
      for (const Address& to : group.translated) {
        uint8_t lookup[2 * 16 + 3];
        memcpy(lookup, to.data(), width);
        memcpy(lookup + width, bytes + width, width + 3);
        group.busiest = std::max<uint64_t>(group.busiest, context.busiest_keys.Get(lookup));
      }
      result.groups.push_back(std::move(group));
    }
  }
  return result;
}

}  // namespace natstats

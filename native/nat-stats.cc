// See nat-stats.h. The busiest (translated address, destination, port) is counted exactly in an
// open-addressing table of fixed-size keys (16 bytes a slot for IPv4, 40 for IPv6) that grows with
// the number of distinct keys, not of entries.
#include "nat-stats.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

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

// Whether a request's filter admits `address`: an empty filter admits every address.
bool Admits(const std::vector<conntrack::Range>& filter, const uint8_t* address, size_t width) {
  return filter.empty() || conntrack::InRanges(filter, address, width);
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

// --flows' records as they are gathered: the records (nat-stats.h, FlowRecords) and an
// open-addressing index of record numbers + 1 (0: empty) by their key, the first 3w + 3 bytes.
class FlowTable {
 public:
  explicit FlowTable(size_t width)
      : width_(width), key_size_(3 * width + 3), records_(std::make_shared<FlowRecords>()) {
    records_->stride = 3 * width + 12;
    const size_t bytes = kFlowRecordsMax * records_->stride;
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped != MAP_FAILED) {
      records_->data = static_cast<uint8_t*>(mapped);
      records_->mapped = bytes;
    }
    index_.assign(1024, 0);
  }

  bool ok() const { return records_->data != nullptr; }

  // One more flow of the key's record; false when no more records fit.
  bool Add(const uint8_t* key) {
    if ((records_->count + 1) * 10 > index_.size() * 7) Grow();
    uint32_t* slot = Find(key);
    if (*slot == 0) {
      if (records_->count >= kFlowRecordsMax) return false;
      uint8_t* record = records_->data + records_->count * records_->stride;
      memcpy(record, key, key_size_);
      *slot = static_cast<uint32_t>(++records_->count);
    }
    uint8_t* record = Record(*slot - 1);
    Put(record, kFlows, Get(record, kFlows) + 1);
    return true;
  }

  // Fills the busiest counts, and sorts the records as they are shown; the index goes.
  std::shared_ptr<FlowRecords> Finish(std::map<uint8_t, Protocol>* protocols) {
    std::vector<uint32_t>().swap(index_);
    const size_t w = width_;
    const size_t count = records_->count;
    std::vector<uint32_t> order(count);
    for (uint32_t i = 0; i < count; i++) order[i] = i;
    const auto sort_by = [&](const std::function<bool(uint32_t, uint32_t)>& less) {
      std::sort(order.begin(), order.end(), less);
    };
    // Runs of `order` whose records agree on `same`, each handed to `each` as [from, to).
    const auto runs = [&](const std::function<bool(const uint8_t*, const uint8_t*)>& same,
                          const std::function<void(size_t, size_t)>& each) {
      for (size_t from = 0; from < count;) {
        size_t to = from + 1;
        while (to < count && same(Record(order[from]), Record(order[to]))) to++;
        each(from, to);
        from = to;
      }
    };
    // (translated, destination, port, protocol): how many flows each translated address has to
    // a destination and port — the busiest of them per protocol, and per record.
    sort_by([&](uint32_t a, uint32_t b) {
      return memcmp(Record(a) + w, Record(b) + w, 2 * w + 3) < 0;
    });
    runs([w](const uint8_t* a, const uint8_t* b) { return memcmp(a + w, b + w, 2 * w + 3) == 0; },
         [&](size_t from, size_t to) {
           uint32_t flows = 0;
           for (size_t i = from; i < to; i++) flows += Get(Record(order[i]), kFlows);
           for (size_t i = from; i < to; i++) Put(Record(order[i]), kBusiest, flows);
           Protocol& figures = (*protocols)[Record(order[from])[3 * w + 2]];
           figures.busiest = std::max<uint64_t>(figures.busiest, flows);
         });
    // (source, destination, port, protocol): a group's flows and its busiest translated address;
    // then a source's flows. Held apart, by record number, for the last sort.
    const auto group_less = [this, w](uint32_t a, uint32_t b) {
      const uint8_t* x = Record(a);
      const uint8_t* y = Record(b);
      int by = memcmp(x, y, w);
      if (by == 0) by = memcmp(x + 2 * w, y + 2 * w, w + 3);
      return by != 0 ? by < 0 : memcmp(x + w, y + w, w) < 0;
    };
    const auto same_group = [w](const uint8_t* a, const uint8_t* b) {
      return memcmp(a, b, w) == 0 && memcmp(a + 2 * w, b + 2 * w, w + 3) == 0;
    };
    sort_by(group_less);
    std::vector<uint32_t> group_flows(count), source_flows(count);
    runs(same_group, [&](size_t from, size_t to) {
      uint32_t flows = 0, busiest = 0;
      for (size_t i = from; i < to; i++) {
        flows += Get(Record(order[i]), kFlows);
        busiest = std::max(busiest, Get(Record(order[i]), kBusiest));
      }
      for (size_t i = from; i < to; i++) {
        group_flows[order[i]] = flows;
        Put(Record(order[i]), kBusiest, busiest);
      }
    });
    runs([w](const uint8_t* a, const uint8_t* b) { return memcmp(a, b, w) == 0; },
         [&](size_t from, size_t to) {
           uint32_t flows = 0;
           for (size_t i = from; i < to; i++) flows += Get(Record(order[i]), kFlows);
           for (size_t i = from; i < to; i++) source_flows[order[i]] = flows;
         });
    // As shown: sources by flows, then each source's groups by flows.
    sort_by([&](uint32_t a, uint32_t b) {
      if (source_flows[a] != source_flows[b]) return source_flows[a] > source_flows[b];
      const int source = memcmp(Record(a), Record(b), w);
      if (source != 0) return source < 0;
      if (group_flows[a] != group_flows[b]) return group_flows[a] > group_flows[b];
      return group_less(a, b);
    });
    std::vector<uint32_t>().swap(group_flows);
    std::vector<uint32_t>().swap(source_flows);
    // The records moved into that order in place, a cycle of the permutation at a time.
    std::vector<bool> placed(count, false);
    std::vector<uint8_t> held(records_->stride);
    for (size_t start = 0; start < count; start++) {
      if (placed[start] || order[start] == start) continue;
      memcpy(held.data(), Record(start), records_->stride);
      size_t at = start;
      for (;;) {
        placed[at] = true;
        const size_t from = order[at];
        if (from == start) {
          memcpy(Record(at), held.data(), records_->stride);
          break;
        }
        memcpy(Record(at), Record(from), records_->stride);
        at = from;
      }
    }
    return records_;
  }

 private:
  // The counts' offsets after the key (nat-stats.h).
  static constexpr size_t kFlows = 1, kBusiest = 5;

  uint8_t* Record(size_t n) const { return records_->data + n * records_->stride; }
  uint32_t Get(const uint8_t* record, size_t at) const {
    uint32_t value;
    memcpy(&value, record + key_size_ + at, 4);
    return value;
  }
  void Put(uint8_t* record, size_t at, uint32_t value) const {
    memcpy(record + key_size_ + at, &value, 4);
  }

  uint64_t Hash(const uint8_t* key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < key_size_; i++) h = (h ^ key[i]) * 1099511628211ull;
    return h ^ (h >> 29);
  }

  uint32_t* Find(const uint8_t* key) {
    const size_t mask = index_.size() - 1;
    for (size_t at = Hash(key) & mask;; at = (at + 1) & mask) {
      uint32_t& slot = index_[at];
      if (slot == 0 || memcmp(Record(slot - 1), key, key_size_) == 0) return &slot;
    }
  }

  void Grow() {
    std::vector<uint32_t> old(index_.size() * 2, 0);
    old.swap(index_);
    const size_t mask = index_.size() - 1;
    for (uint32_t number : old) {
      if (number == 0) continue;
      size_t at = Hash(Record(number - 1)) & mask;
      while (index_[at] != 0) at = (at + 1) & mask;
      index_[at] = number;
    }
  }

  size_t width_;
  size_t key_size_;
  std::shared_ptr<FlowRecords> records_;
  std::vector<uint32_t> index_;
};

struct Context {
  const Request* request;
  size_t width;
  double started;
  Result* result;
  CountTable busiest_keys;
  std::unique_ptr<FlowTable> flows;  // with by_source only
};

int OnEntry(nf_conntrack* ct, void* data) {
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
  if (!Admits(context->request->from, source, width) ||
      !Admits(context->request->to, destination, width))
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
  Protocol& figures = result.protocols[protocol];
  figures.flows++;
  if (context->flows) {
    // Key: source, translated address, destination, port, protocol (the busiest comes at the end).
    uint8_t record_key[3 * 16 + 3];
    memcpy(record_key, source, width);
    memcpy(record_key + width, key, 2 * width + 3);
    if (!context->flows->Add(record_key)) {
      result.complete = false;
      return NFCT_CB_STOP;
    }
    return NFCT_CB_CONTINUE;
  }
  const uint32_t count = context->busiest_keys.Add(key);
  figures.busiest = std::max<uint64_t>(figures.busiest, count);
  return NFCT_CB_CONTINUE;
}

}  // namespace

Result Sample(const Request& request) {
  Result result;
  const size_t width = request.family == AF_INET ? 4 : 16;
  Context context{&request, width, ThreadCpuSeconds(), &result, CountTable(2 * width + 3), nullptr};
  if (request.by_source) {
    context.flows = std::make_unique<FlowTable>(width);
    if (!context.flows->ok()) return Failure(std::string("mmap: ") + strerror(errno));
  }
  // Only source-translated entries; OnEntry checks the status again for a kernel that ignores the
  // filter.
  const conntrack::DumpEnd end = conntrack::Dump(request.family, true, OnEntry, &context);
  result.cpu_s = ThreadCpuSeconds() - context.started;
  // A dump this side stopped (the CPU budget, the records' bound) is no failure.
  if (!end.ok && result.complete) return Failure(end.error);
  if (context.flows) {
    result.flows = context.flows->Finish(&result.protocols);
    malloc_trim(0);  // the index and the sort's vectors, given back
  }
  return result;
}

FlowRecords::~FlowRecords() {
  if (data != nullptr) munmap(data, mapped);
}

}  // namespace natstats

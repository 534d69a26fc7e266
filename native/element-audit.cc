// element-audit.h: a set's elements read back and compared with the agent's own prefixes.
#include "element-audit.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>

#include <algorithm>
#include <cstring>

namespace audit {
namespace {

// How many differences of each kind are named in the answer.
constexpr size_t kNamed = 8;

// One prefix ("ADDR/LEN" or "ADDR", `len` bytes at `text`) as its first and last key; false when
// it does not parse.
bool ParsePrefix(const char* text, size_t len, int family, bool concat, std::vector<uint8_t>* out) {
  const size_t width = family == 4 ? 4 : 16;
  const char* slash = static_cast<const char*>(memchr(text, '/', len));
  const size_t address_len = slash ? static_cast<size_t>(slash - text) : len;
  char address[INET6_ADDRSTRLEN] = {};
  if (address_len == 0 || address_len >= sizeof(address)) return false;
  memcpy(address, text, address_len);
  uint8_t bytes[16] = {};
  if (inet_pton(family == 4 ? AF_INET : AF_INET6, address, bytes) != 1) return false;
  size_t length = width * 8;
  if (slash) {
    const char* bits = slash + 1;
    const size_t bits_len = len - address_len - 1;
    if (bits_len == 0 || bits_len > 3) return false;
    length = 0;
    for (size_t i = 0; i < bits_len; i++) {
      if (bits[i] < '0' || bits[i] > '9') return false;
      length = length * 10 + static_cast<size_t>(bits[i] - '0');
    }
    if (length > width * 8) return false;
  }
  const size_t key = width + (concat ? 4 : 0);
  const size_t at = out->size();
  out->resize(at + 2 * key, 0);
  uint8_t* first = out->data() + at;
  uint8_t* last = first + key;
  for (size_t b = 0; b < width; b++) {
    const size_t kept = length >= 8 * (b + 1) ? 8 : length > 8 * b ? length - 8 * b : 0;
    const uint8_t mask = static_cast<uint8_t>(kept == 0 ? 0 : 0xff << (8 - kept));
    first[b] = bytes[b] & mask;
    last[b] = static_cast<uint8_t>(bytes[b] | static_cast<uint8_t>(~mask));
  }
  if (concat) last[width] = 255;  // meta l4proto 0-255, padded to 4 bytes: 0 first, 255 last
  return true;
}

std::string Address(const uint8_t* key, int family) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == 4 ? AF_INET : AF_INET6, key, text, sizeof(text));
  return text;
}

std::string Range(const uint8_t* element, size_t key, int family) {
  return Address(element, family) + "-" + Address(element + key, family);
}

}  // namespace

SetAudit AuditSet(int family, const std::string& table, const std::string& set, bool concat,
                  const std::string& expected) {
  SetAudit result;
  const size_t width = family == 4 ? 4 : 16;
  const size_t key = width + (concat ? 4 : 0);
  const size_t record = 2 * key;
  std::vector<uint8_t> meant;
  meant.reserve(expected.size() / 8 * record);
  size_t from = 0;
  while (from < expected.size()) {
    size_t end = expected.find('\n', from);
    if (end == std::string::npos) end = expected.size();
    const size_t len = end - from;
    if (len > 0 && !ParsePrefix(expected.data() + from, len, family, concat, &meant)) {
      result.status = {false, "not an IPv" + std::to_string(family) +
                                  " prefix: " + expected.substr(from, std::min<size_t>(len, 64))};
      return result;
    }
    from = end + 1;
  }
  netlink::SetElements held = netlink::ReadSetElements(
      static_cast<uint8_t>(family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6), table, set, key, !concat);
  if (!held.status.ok) {
    result.status = held.status;
    return result;
  }
  result.status = {true, ""};
  // Both as sorted runs of fixed-width records, walked side by side.
  const size_t count = meant.size() / record;
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; i++) order[i] = i;
  const auto before = [&](size_t a, size_t b) {
    return memcmp(meant.data() + a * record, meant.data() + b * record, record) < 0;
  };
  // The agent's lists come in address order: checked, and sorted only when they are not.
  if (!std::is_sorted(order.begin(), order.end(), before))
    std::sort(order.begin(), order.end(), before);
  result.meant = count;
  result.held = held.elements.size() / record;
  size_t i = 0;
  size_t j = 0;
  const auto missing = [&](const uint8_t* element) {
    if (result.missing_count++ < kNamed) result.missing.push_back(Range(element, key, family));
  };
  const auto extra = [&](const uint8_t* element) {
    if (result.extra_count++ < kNamed) result.extra.push_back(Range(element, key, family));
  };
  while (i < count || j < result.held) {
    const uint8_t* want = i < count ? meant.data() + order[i] * record : nullptr;
    const uint8_t* have = j < result.held ? held.elements.data() + j * record : nullptr;
    const int order_of = !want ? 1 : !have ? -1 : memcmp(want, have, record);
    if (order_of == 0) {
      i++;
      j++;
    } else if (order_of < 0) {
      missing(want);
      i++;
    } else {
      extra(have);
      j++;
    }
  }
  return result;
}

}  // namespace audit

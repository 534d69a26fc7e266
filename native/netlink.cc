// netlink.h: NFT_MSG_GETGEN, the table, chain, rule and counter dumps, and the reads that audit our
// sets and rules, on a netfilter netlink socket (the wire: netlink-wire.h).
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
#include "netlink-wire.h"

namespace netlink {

using namespace wire;

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

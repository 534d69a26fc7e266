// netlink.h: our sets' elements written in one batch with the mark moved (the everyday edit,
// docs/writes.md), on a netfilter netlink socket (the wire: netlink-wire.h).
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
#include "netlink.h"

namespace netlink {

using namespace wire;

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
    if (edit.tables[t].chain.empty()) continue;
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
    if (table.chain.empty()) continue;
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

}  // namespace netlink

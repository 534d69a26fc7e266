// The wire helpers shared by the parts of netlink.h (netlink.cc the dumps and reads,
// netlink-batch.cc the element batches, netlink-monitor.cc the commit monitor): internal to them,
// never included by the addon's N-API side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "netlink.h"

namespace netlink {
namespace wire {

// One nf_tables request on a netfilter netlink socket. For each message of the answer,
// `on_message` gets its nfgenmsg family, then `on_attr` each attribute (type, payload, length)
// and returns false to stop. Errors come back as the Status's text.
using MessageVisitor = std::function<void(uint8_t family)>;
using AttrVisitor = std::function<bool(uint16_t type, const char* data, size_t len)>;
Status NetlinkRequest(uint16_t msg_type, uint16_t flags, const std::string& what,
                      const MessageVisitor& on_message, const AttrVisitor& on_attr,
                      uint8_t family = 0, const std::vector<char>& attrs = {});

// nft's name of a netfilter family, or nullptr for one it has none for; and back.
const char* FamilyName(uint8_t family);
uint8_t FamilyNumber(const std::string& name);

// Appends a netlink attribute (nested when `nest`: its length is fixed by End). Defined out of
// line: inlined into each caller, GCC 12 warns of a copy into a region of size 0 that cannot
// happen.
class Writer {
 public:
  explicit Writer(std::vector<char>* buffer) : buffer_(buffer) {}
  size_t Begin(uint16_t type);
  void End(size_t at);
  void Put(uint16_t type, const void* data, size_t length);
  void PutString(uint16_t type, const std::string& text);

 private:
  void Append(const void* data, size_t length);
  std::vector<char>* buffer_;
};

// Starts a message of the batch; Finish sets its length.
size_t StartMessage(std::vector<char>* batch, uint16_t type, uint16_t flags, uint8_t family,
                    uint32_t seq, uint16_t res_id);
void FinishMessage(std::vector<char>* batch, size_t at);

// An nlattr's length is 16 bits: the elements go in messages well under that.
constexpr size_t kElementsPerMessage = 512;

// Sends one batch and reads the `acked` ACKs it asks for; any error means the kernel took none of
// it. `what` names the change in an error.
Status SendBatch(const std::vector<char>& batch, size_t acked, const std::string& what);

// Calls `visit` for each attribute in a nested attribute's payload.
void ForEachAttr(const char* data, size_t len,
                 const std::function<void(uint16_t type, const char* data, size_t len)>& visit);

// An attribute's payload as text (up to its NUL), and as a big-endian number.
std::string Text(const char* data, size_t len);
uint32_t Be32(const char* data, size_t len);
uint64_t Be64(const char* data, size_t len);

// A base chain's hook by nft's name for it in that family.
const char* HookName(const std::string& family, uint32_t hook);

// A rule of a chain as the kernel dumps it: what EditElements copies of the marked one.
struct RawRule {
  uint64_t handle = 0;
  std::string expressions;  // NFTA_RULE_EXPRESSIONS' payload
  std::string userdata;     // NFTA_RULE_USERDATA's payload
};

// The comment in a rule's userdata (TLVs of a type byte and a length byte: libnftnl's udata).
std::string CommentOf(const std::string& userdata);

// One chain's rules as the kernel holds them (a NFT_MSG_GETRULE dump filtered to the chain).
Status ChainRules(uint8_t family, const std::string& table, const std::string& chain,
                  std::vector<RawRule>* rules);

}  // namespace wire
}  // namespace netlink

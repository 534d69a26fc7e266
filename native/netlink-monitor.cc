// netlink.h: the commit monitor, a socket in nf_tables' group that hears which tables each
// commit names (docs/writes.md, "Beside a busy node"; the wire: netlink-wire.h).
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

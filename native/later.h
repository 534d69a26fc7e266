// What the kernel makes wait after the answer is in hand — closing a netfilter netlink socket after
// a commit, reaping libnftables' child — done on a thread of its own (docs/design.md,
// "libnftables"). Plain C++: nothing of N-API.
#pragma once

#include <functional>

namespace later {

// Runs `work` on a thread of its own, or here when no thread can be started (EAGAIN at the
// process's limit).
void Run(const std::function<void()>& work);

// Closes a netlink socket on a thread of its own: the close waits for the kernel to release the
// objects the namespace's last transaction replaced, an RCU grace period after any commit by
// anyone.
void Close(int fd);

}  // namespace later

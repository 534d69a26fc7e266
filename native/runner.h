// Runs nft scripts through libnftables, each in a child process forked for the call
// (docs/design.md, "libnftables"). Plain C++: nothing of N-API.
#pragma once

#include <functional>
#include <string>

namespace runner {

struct Outcome {
  bool ok;
  std::string text;  // output on success, the error text on failure
  // On failure: "error" (libnftables refused), "crash" (its process died), "timeout" (killed after
  // the time limit), "spawn" (no process could be started). See docs/design.md, "libnftables".
  std::string kind = "error";
};

// How libnftables prints: as nft does, as `nft -j`, or as `nft -a -s` (each rule with its handle,
// counters without their values: a listing that stays the same while traffic flows).
enum class Output { kText, kJson, kListing };

// Runs the script in a child forked for this one call, within timeout_ms; blocks the calling thread
// (a pool thread) until the answer is in, the child died or the time ran out.
Outcome RunScript(const std::string& script, bool dry_run, Output output, int timeout_ms);

}  // namespace runner

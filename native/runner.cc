// runner.h: libnftables in a forked child per call, its answer over a pipe.
#include "runner.h"

#include <fcntl.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "later.h"

namespace runner {
namespace {

// Runs the script and hands the outcome to `answer` while the context, and with it the netlink
// socket that committed, is still open (see RunScript for why that order matters).
void RunScriptHere(const std::string& script, bool dry_run, Output output,
                   const std::function<void(const Outcome&)>& answer) {
  std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free);
  if (!ctx) return answer({false, "nft_ctx_new failed"});
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return answer({false, "cannot buffer libnftables output"});
  nft_ctx_set_dry_run(ctx.get(), dry_run);
  unsigned int flags = nft_ctx_output_get_flags(ctx.get());
  if (output == Output::kJson) flags |= NFT_CTX_OUTPUT_JSON;
  if (output == Output::kListing) flags |= NFT_CTX_OUTPUT_HANDLE | NFT_CTX_OUTPUT_STATELESS;
  nft_ctx_output_set_flags(ctx.get(), flags);
  int rc = nft_run_cmd_from_buffer(ctx.get(), script.c_str());
  const char* out = nft_ctx_get_output_buffer(ctx.get());
  const char* err = nft_ctx_get_error_buffer(ctx.get());
  if (rc != 0) return answer({false, err && *err ? err : "libnftables failed without a message"});
  answer({true, out ? out : ""});
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string DescribeEnd(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return std::string("libnftables crashed (SIG") + (name ? name : std::to_string(sig)) + ")";
  }
  if (WIFEXITED(status))
    return "libnftables' process exited with status " + std::to_string(WEXITSTATUS(status)) +
           " before answering";
  return "libnftables' process ended abnormally";
}

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

namespace {

// Reaps a child without waiting for it here: see RunScript.
void ReapLater(pid_t pid) {
  later::Run([pid] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  });
}

}  // namespace

// Runs the script in a child forked for this one call, so that nothing libnftables does (a
// SIGSEGV on objects it cannot parse, an assertion, a hang) can reach the agent's process; the
// child's memory goes back to the system when it exits. The child writes its answer to a pipe — one
// status byte, the text's length (8 bytes), the text — then _exit()s; a child that ends before its
// whole answer died inside libnftables. Once the answer is complete the call returns and the child
// is reaped on a thread of its own: its exit closes the netlink socket that committed, which the
// kernel holds up for a grace period (later.h) — the new ruleset is in place by then.
Outcome RunScript(const std::string& script, bool dry_run, Output output, int timeout_ms) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return {false, std::string("cannot start libnftables' process: pipe: ") + strerror(errno),
            "spawn"};
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    close(fds[0]);
    close(fds[1]);
    return {false, std::string("cannot start libnftables' process: fork: ") + strerror(saved),
            "spawn"};
  }
  if (pid == 0) {
    // Only this thread exists here. Signals the agent handles (libuv's pipe) go back to defaults,
    // so a signal sent to the process group never reaches the agent's loop through the child.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD})
      signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    close(fds[0]);
    // Die with the agent: an orphan committing a stale script after a restarted agent wrote a newer
    // one would undo it. (The death signal follows the forking thread, a pool thread that lives as
    // long as the process.) The getppid() check closes the race with a parent already gone.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(4);
    bool written = false;
    RunScriptHere(script, dry_run, output, [&](const Outcome& outcome) {
      char header[9];
      header[0] = outcome.ok ? '1' : '0';
      const uint64_t length = outcome.text.size();
      memcpy(header + 1, &length, sizeof(length));
      written = WriteAll(fds[1], header, sizeof(header)) &&
                WriteAll(fds[1], outcome.text.data(), outcome.text.size());
    });
    _exit(written ? 0 : 3);
  }
  close(fds[1]);
  std::string received;
  bool timed_out = false;
  bool complete = false;
  const int64_t deadline = NowMs() + timeout_ms;
  char buf[65536];
  while (!complete) {
    int64_t left = deadline - NowMs();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // the deadline check above ends the loop
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is gone, whatever it wrote
    received.append(buf, static_cast<size_t>(n));
    if (received.size() >= 9) {
      uint64_t length = 0;
      memcpy(&length, received.data() + 1, sizeof(length));
      complete = received.size() - 9 >= length;
    }
  }
  close(fds[0]);
  if (complete) {
    ReapLater(pid);
    return {received[0] == '1', received.substr(9)};
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return {false,
            "libnftables did not finish within " + std::to_string(timeout_ms) +
                " ms; its process was killed",
            "timeout"};
  return {false, DescribeEnd(status), "crash"};
}

}  // namespace runner

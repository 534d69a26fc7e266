// nftables_napi: run nft scripts through libnftables, each in a child process forked for the call,
// waited on from the libuv threadpool. Layers: plain C++ (RunScript, ReadGenerationId) that knows
// nothing of N-API, one AsyncWorker, and thin glue that copies arguments on the JS thread and
// queues the work.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <malloc.h>
#include <napi.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "conntrack.h"

namespace {

struct Outcome {
  bool ok;
  std::string text;  // output on success, the error text on failure
  // On failure: "error" (libnftables refused), "crash" (its process died), "timeout" (killed after
  // the time limit), "spawn" (no process could be started). See docs/design.md, "libnftables".
  std::string kind = "error";
};

// Runs the script and hands the outcome to `answer` while the context, and with it the netlink
// socket that committed, is still open (see RunScript for why that order matters).
void RunScriptHere(const std::string& script, bool dry_run, bool json,
                   const std::function<void(const Outcome&)>& answer) {
  std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free);
  if (!ctx) return answer({false, "nft_ctx_new failed"});
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return answer({false, "cannot buffer libnftables output"});
  nft_ctx_set_dry_run(ctx.get(), dry_run);
  if (json)
    nft_ctx_output_set_flags(ctx.get(), nft_ctx_output_get_flags(ctx.get()) | NFT_CTX_OUTPUT_JSON);
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

// Closing a netfilter netlink socket waits while the kernel releases the objects the namespace's
// last transaction replaced, an RCU grace period (~12 ms here) after any commit by anyone: the
// answer is in hand by then, so the sockets of plain netlink requests are closed on a thread of
// their own, and libnftables' children are reaped on one (RunScript).
// Without a thread to spare (EAGAIN at the process's limit), the work is done here after all.
void Later(const std::function<void()>& work) {
  try {
    std::thread(work).detach();
  } catch (const std::system_error&) {
    work();
  }
}

void CloseLater(int fd) {
  Later([fd] { close(fd); });
}

// Reaps a child without waiting for it here: see RunScript.
void ReapLater(pid_t pid) {
  Later([pid] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  });
}

// Runs the script in a child forked for this one call, so that nothing libnftables does (a
// SIGSEGV on objects it cannot parse, an assertion, a hang) can reach the agent's process; the
// child's memory goes back to the system when it exits. The child writes its answer to a pipe — one
// status byte, the text's length (8 bytes), the text — then _exit()s; a child that ends before its
// whole answer died inside libnftables. Once the answer is complete the call returns and the child
// is reaped on a thread of its own: its exit closes the netlink socket that committed, which the
// kernel holds up for a grace period (CloseLater) — the new ruleset is in place by then.
Outcome RunScript(const std::string& script, bool dry_run, bool json, int timeout_ms) {
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
    RunScriptHere(script, dry_run, json, [&](const Outcome& outcome) {
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

// One nf_tables request on a netfilter netlink socket. For each message of the answer,
// `on_message` gets its nfgenmsg family, then `on_attr` each attribute (type, payload, length)
// and returns false to stop. Errors come back as the Outcome's text.
using MessageVisitor = std::function<void(uint8_t family)>;
using AttrVisitor = std::function<bool(uint16_t type, const char* data, size_t len)>;

Outcome NetlinkRequest(uint16_t msg_type, uint16_t flags, const std::string& what,
                       const MessageVisitor& on_message, const AttrVisitor& on_attr) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno)};
  std::unique_ptr<int, std::function<void(int*)>> guard(&fd, [](int* f) { CloseLater(*f); });
  timeval limit{5, 0};  // a kernel answers in microseconds; never wait forever
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  struct {
    nlmsghdr nlh;
    nfgenmsg nfg;
  } req{};
  req.nlh.nlmsg_len = sizeof(req);
  req.nlh.nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg_type);
  req.nlh.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  req.nlh.nlmsg_seq = 1;
  req.nfg.nfgen_family = AF_UNSPEC;
  req.nfg.version = NFNETLINK_V0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return {false, std::string("netlink send: ") + strerror(errno)};
  const bool dump = (flags & NLM_F_DUMP) != 0;
  alignas(nlmsghdr) static thread_local char buf[65536];
  for (;;) {
    ssize_t len = recv(fd, buf, sizeof(buf), 0);
    if (len < 0 && errno == EINTR) continue;
    if (len < 0) return {false, std::string("netlink recv: ") + strerror(errno)};
    for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nlh, len);
         nlh = NLMSG_NEXT(nlh, len)) {
      if (nlh->nlmsg_type == NLMSG_DONE) return {true, ""};
      if (nlh->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(nlh));
        if (e->error == 0) continue;
        return {false, what + ": " + strerror(-e->error)};
      }
      on_message(static_cast<nfgenmsg*>(NLMSG_DATA(nlh))->nfgen_family);
      int attrs_len = static_cast<int>(nlh->nlmsg_len) - NLMSG_SPACE(sizeof(nfgenmsg));
      auto* attr = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(nlh)) +
                                             NLMSG_ALIGN(sizeof(nfgenmsg)));
      while (attrs_len >= static_cast<int>(sizeof(nlattr)) && attr->nla_len >= sizeof(nlattr) &&
             attr->nla_len <= attrs_len) {
        if (!on_attr(attr->nla_type & NLA_TYPE_MASK, reinterpret_cast<char*>(attr) + NLA_HDRLEN,
                     attr->nla_len - NLA_HDRLEN))
          return {true, ""};
        attrs_len -= NLA_ALIGN(attr->nla_len);
        attr = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(attr) + NLA_ALIGN(attr->nla_len));
      }
    }
    if (!dump) return {true, ""};
  }
}

// The namespace's nftables generation id: one NFT_MSG_GETGEN request, answered with NFTA_GEN_ID
// (big-endian u32). Plain netlink, no libnftables: it runs in the agent's process.
Outcome ReadGenerationId() {
  std::string id;
  Outcome outcome = NetlinkRequest(
      NFT_MSG_GETGEN, 0, "NFT_MSG_GETGEN", [](uint8_t) {},
      [&id](uint16_t type, const char* data, size_t len) {
        if (type != NFTA_GEN_ID || len < 4) return true;
        uint32_t raw;
        memcpy(&raw, data, sizeof(raw));
        id = std::to_string(ntohl(raw));
        return false;
      });
  if (!outcome.ok) return outcome;
  if (id.empty()) return {false, "NFT_MSG_GETGEN: no generation id in the answer"};
  return {true, id};
}

const char* FamilyName(uint8_t family) {
  switch (family) {
    case NFPROTO_INET:
      return "inet";
    case NFPROTO_IPV4:
      return "ip";
    case NFPROTO_ARP:
      return "arp";
    case NFPROTO_NETDEV:
      return "netdev";
    case NFPROTO_BRIDGE:
      return "bridge";
    case NFPROTO_IPV6:
      return "ip6";
    default:
      return nullptr;
  }
}

// Every table in the namespace as "family name" lines, from one NFT_MSG_GETTABLE dump. Plain
// netlink: it works where libnftables cannot read what the tables hold, to say which one it is.
Outcome ListTables() {
  std::string lines;
  const char* family = nullptr;
  Outcome outcome = NetlinkRequest(
      NFT_MSG_GETTABLE, NLM_F_DUMP, "NFT_MSG_GETTABLE",
      [&family](uint8_t f) { family = FamilyName(f); },
      [&lines, &family](uint16_t type, const char* data, size_t len) {
        if (type == NFTA_TABLE_NAME && family)
          lines.append(family).append(" ").append(data, strnlen(data, len)).append("\n");
        return true;
      });
  if (!outcome.ok) return outcome;
  return {true, lines};
}

// One generic worker: runs a job off the JS thread, resolves with its text or rejects with its
// error.
class Worker : public Napi::AsyncWorker {
 public:
  Worker(Napi::Env env, std::function<Outcome()> job)
      : Napi::AsyncWorker(env),
        job_(std::move(job)),
        deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    outcome_ = job_();
    if (!outcome_.ok) SetError(outcome_.text);
  }
  void OnOK() override { deferred_.Resolve(Napi::String::New(Env(), outcome_.text)); }
  void OnError(const Napi::Error& error) override {
    Napi::Object value = error.Value();
    value.Set("code", Napi::String::New(Env(), outcome_.kind));
    deferred_.Reject(value);
  }

 private:
  std::function<Outcome()> job_;
  Napi::Promise::Deferred deferred_;
  Outcome outcome_{false, ""};
};

// run(script: string, dryRun: boolean, json: boolean, timeoutMs: number): Promise<string>
// Rejects with an Error whose code is "error", "crash", "timeout" or "spawn".
Napi::Value Run(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[0].IsString() || !info[1].IsBoolean() || !info[2].IsBoolean() ||
      !info[3].IsNumber())
    throw Napi::TypeError::New(
        env, "run(script: string, dryRun: boolean, json: boolean, timeoutMs: number)");
  std::string script = info[0].As<Napi::String>().Utf8Value();  // copied before queueing
  bool dry_run = info[1].As<Napi::Boolean>().Value();
  bool json = info[2].As<Napi::Boolean>().Value();
  int timeout_ms = info[3].As<Napi::Number>().Int32Value();
  if (timeout_ms <= 0) throw Napi::RangeError::New(env, "timeoutMs must be positive");
  auto* worker = new Worker(env, [script = std::move(script), dry_run, json, timeout_ms]() {
    return RunScript(script, dry_run, json, timeout_ms);
  });
  worker->Queue();
  return worker->Promise();
}

// generationId(): Promise<string>, the decimal u32 of NFTA_GEN_ID
Napi::Value GenerationId(const Napi::CallbackInfo& info) {
  auto* worker = new Worker(info.Env(), ReadGenerationId);
  worker->Queue();
  return worker->Promise();
}

// listTables(): Promise<string>, one "family name" line per table in the namespace
Napi::Value Tables(const Napi::CallbackInfo& info) {
  auto* worker = new Worker(info.Env(), ListTables);
  worker->Queue();
  return worker->Promise();
}

// conntrackFlush(family: 4 | 6, protocols: number[], ranges: Buffer, listOnly: boolean):
//   Promise<string>
// ranges: pairs of first and last address (4 or 16 bytes each, network order), sorted, disjoint.
// Resolves with lines "seen N", "deleted PROTOCOL N", with listOnly "reply SOURCE SPORT DEST DPORT"
// (addresses as inet_ntop prints them) and, when something failed, "error TEXT".
Napi::Value ConntrackFlush(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[0].IsNumber() || !info[1].IsArray() || !info[2].IsBuffer() ||
      !info[3].IsBoolean())
    throw Napi::TypeError::New(
        env,
        "conntrackFlush(family: 4 | 6, protocols: number[], ranges: Buffer, listOnly: boolean)");
  int family = info[0].As<Napi::Number>().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  conntrack::FlushRequest request;
  request.family = family == 4 ? AF_INET : AF_INET6;
  request.list_only = info[3].As<Napi::Boolean>().Value();
  Napi::Array protocols = info[1].As<Napi::Array>();
  for (uint32_t i = 0; i < protocols.Length(); i++) {
    Napi::Value value = protocols.Get(i);
    int protocol = value.IsNumber() ? value.As<Napi::Number>().Int32Value() : -1;
    if (protocol < 0 || protocol > 255) throw Napi::RangeError::New(env, "protocols are 0-255");
    request.protocols.push_back(static_cast<uint8_t>(protocol));
  }
  Napi::Buffer<uint8_t> ranges = info[2].As<Napi::Buffer<uint8_t>>();
  size_t width = family == 4 ? 4 : 16;
  if (ranges.Length() % (2 * width) != 0)
    throw Napi::RangeError::New(env, "ranges must hold first/last address pairs");
  for (size_t at = 0; at < ranges.Length(); at += 2 * width) {  // copied before queueing
    conntrack::Range range;
    memcpy(range.first.data(), ranges.Data() + at, width);
    memcpy(range.last.data(), ranges.Data() + at + width, width);
    request.ranges.push_back(range);
  }
  auto* worker = new Worker(env, [request = std::move(request)]() {
    conntrack::FlushResult result = conntrack::Flush(request);
    std::string text = "seen " + std::to_string(result.seen) + "\n";
    for (const auto& [protocol, count] : result.deleted)
      text += "deleted " + std::to_string(protocol) + " " + std::to_string(count) + "\n";
    int af = request.family;
    char source[INET6_ADDRSTRLEN], destination[INET6_ADDRSTRLEN];
    for (const auto& reply : result.replies) {
      if (!inet_ntop(af, reply.source.data(), source, sizeof source) ||
          !inet_ntop(af, reply.destination.data(), destination, sizeof destination))
        continue;
      text += std::string("reply ") + source + " " + std::to_string(reply.source_port) + " " +
              destination + " " + std::to_string(reply.destination_port) + "\n";
    }
    if (!result.ok) text += "error " + result.error + "\n";
    return Outcome{true, text};
  });
  worker->Queue();
  return worker->Promise();
}

// Gives the C heap's free pages back to the system (glibc's malloc_trim): every thread that
// allocated (libuv's pool, V8's helpers) keeps an arena of its own, and their freed memory
// otherwise stays in the process's RSS. Returns whether anything was released.
Napi::Value ReleaseMemory(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), malloc_trim(0) == 1);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("run", Napi::Function::New(env, Run));
  exports.Set("generationId", Napi::Function::New(env, GenerationId));
  exports.Set("listTables", Napi::Function::New(env, Tables));
  exports.Set("conntrackFlush", Napi::Function::New(env, ConntrackFlush));
  exports.Set("releaseMemory", Napi::Function::New(env, ReleaseMemory));
  exports.Set("version", Napi::String::New(env, "nftables-napi 1.3.0"));
  exports.Set("libnftablesVersion", Napi::String::New(env, LIBNFTABLES_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(nftables_napi, Init)

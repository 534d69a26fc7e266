// nftables_napi: run nft scripts through libnftables on the libuv threadpool.
// Layers: plain C++ (RunScript, ReadGenerationId) that knows nothing of N-API, one AsyncWorker,
// and thin glue that copies arguments on the JS thread and queues the work.
#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <malloc.h>
#include <napi.h>
#include <nftables/libnftables.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace {

struct Outcome {
  bool ok;
  std::string text;  // output on success, libnftables' error text on failure
};

// libnftables is not safe for concurrent use (FIELD-NOTES): one call at a time, per process.
std::mutex nft_mutex;

Outcome RunScriptLocked(const std::string& script, bool dry_run, bool json) {
  std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free);
  if (!ctx) return {false, "nft_ctx_new failed"};
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return {false, "cannot buffer libnftables output"};
  nft_ctx_set_dry_run(ctx.get(), dry_run);
  if (json)
    nft_ctx_output_set_flags(ctx.get(), nft_ctx_output_get_flags(ctx.get()) | NFT_CTX_OUTPUT_JSON);
  int rc = nft_run_cmd_from_buffer(ctx.get(), script.c_str());
  const char* out = nft_ctx_get_output_buffer(ctx.get());
  const char* err = nft_ctx_get_error_buffer(ctx.get());
  if (rc != 0) return {false, err && *err ? err : "libnftables failed without a message"};
  return {true, out ? out : ""};
}

// Above this size, give the freed parse tree back: glibc keeps it in the pool thread's arena.
constexpr size_t kTrimAfterBytes = 64 * 1024;

Outcome RunScript(const std::string& script, bool dry_run, bool json) {
  std::lock_guard<std::mutex> lock(nft_mutex);
  Outcome outcome = RunScriptLocked(script, dry_run, json);  // the context is freed on return
  if (script.size() > kTrimAfterBytes || outcome.text.size() > kTrimAfterBytes) malloc_trim(0);
  return outcome;
}

// The namespace's nftables generation id: one NFT_MSG_GETGEN request on a netfilter netlink socket.
Outcome ReadGenerationId() {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return {false, std::string("netlink socket: ") + strerror(errno)};
  std::unique_ptr<int, std::function<void(int*)>> guard(&fd, [](int* f) { close(*f); });
  struct {
    nlmsghdr nlh;
    nfgenmsg nfg;
  } req{};
  req.nlh.nlmsg_len = sizeof(req);
  req.nlh.nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
  req.nlh.nlmsg_flags = NLM_F_REQUEST;
  req.nlh.nlmsg_seq = 1;
  req.nfg.nfgen_family = AF_UNSPEC;
  req.nfg.version = NFNETLINK_V0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return {false, std::string("netlink send: ") + strerror(errno)};
  alignas(nlmsghdr) char buf[8192];
  ssize_t len = recv(fd, buf, sizeof(buf), 0);
  if (len < 0) return {false, std::string("netlink recv: ") + strerror(errno)};
  for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nlh, len);
       nlh = NLMSG_NEXT(nlh, len)) {
    if (nlh->nlmsg_type == NLMSG_ERROR) {
      auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(nlh));
      return {false, std::string("NFT_MSG_GETGEN: ") + strerror(-e->error)};
    }
    int attrs_len = static_cast<int>(nlh->nlmsg_len) - NLMSG_SPACE(sizeof(nfgenmsg));
    auto* attr = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(nlh)) +
                                           NLMSG_ALIGN(sizeof(nfgenmsg)));
    while (attrs_len >= static_cast<int>(sizeof(nlattr)) && attr->nla_len >= sizeof(nlattr) &&
           attr->nla_len <= attrs_len) {
      if ((attr->nla_type & NLA_TYPE_MASK) == NFTA_GEN_ID && attr->nla_len >= NLA_HDRLEN + 4) {
        uint32_t id;
        memcpy(&id, reinterpret_cast<char*>(attr) + NLA_HDRLEN, sizeof(id));
        return {true, std::to_string(ntohl(id))};
      }
      attrs_len -= NLA_ALIGN(attr->nla_len);
      attr = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(attr) + NLA_ALIGN(attr->nla_len));
    }
  }
  return {false, "NFT_MSG_GETGEN: no generation id in the answer"};
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
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  std::function<Outcome()> job_;
  Napi::Promise::Deferred deferred_;
  Outcome outcome_{false, ""};
};

// run(script: string, dryRun: boolean, json: boolean): Promise<string>
Napi::Value Run(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsString() || !info[1].IsBoolean() || !info[2].IsBoolean())
    throw Napi::TypeError::New(env, "run(script: string, dryRun: boolean, json: boolean)");
  std::string script = info[0].As<Napi::String>().Utf8Value();  // copied before queueing
  bool dry_run = info[1].As<Napi::Boolean>().Value();
  bool json = info[2].As<Napi::Boolean>().Value();
  auto* worker = new Worker(env, [script = std::move(script), dry_run, json]() {
    return RunScript(script, dry_run, json);
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

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("run", Napi::Function::New(env, Run));
  exports.Set("generationId", Napi::Function::New(env, GenerationId));
  exports.Set("version", Napi::String::New(env, "nftables-napi 1.0.0"));
  return exports;
}

}  // namespace

NODE_API_MODULE(nftables_napi, Init)

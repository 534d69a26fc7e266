// nftables_napi: the N-API glue over three plain C++ layers that know nothing of N-API — runner
// (libnftables in a child forked per call), netlink (plain nf_tables requests) and conntrack
// (libnetfilter_conntrack). Each call copies its arguments on the JS thread, runs its job on a pool
// thread through the one Worker, and resolves with JS values built back on the JS thread.
#include <arpa/inet.h>
#include <malloc.h>
#include <napi.h>
#include <netinet/in.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "conntrack.h"
#include "netlink.h"
#include "runner.h"

namespace {

// What a job hands back to the JS thread: a failure (its text and kind), or how to build the value.
struct Answer {
  bool ok = false;
  std::string error;
  // "error", "crash", "timeout" or "spawn" (docs/design.md, "libnftables").
  std::string kind = "error";
  std::function<Napi::Value(Napi::Env)> value;
};

Answer Failed(std::string error, std::string kind = "error") {
  return {false, std::move(error), std::move(kind), nullptr};
}

Answer Value(std::function<Napi::Value(Napi::Env)> value) { return {true, "", "error", value}; }

// The one worker: runs a job off the JS thread; resolves with the job's value or rejects with an
// Error whose `code` is the failure's kind.
class Worker : public Napi::AsyncWorker {
 public:
  Worker(Napi::Env env, std::function<Answer()> job)
      : Napi::AsyncWorker(env),
        job_(std::move(job)),
        deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    answer_ = job_();
    if (!answer_.ok) SetError(answer_.error);
  }
  void OnOK() override { deferred_.Resolve(answer_.value(Env())); }
  void OnError(const Napi::Error& error) override {
    Napi::Object value = error.Value();
    value.Set("code", Napi::String::New(Env(), answer_.kind));
    deferred_.Reject(value);
  }

 private:
  std::function<Answer()> job_;
  Napi::Promise::Deferred deferred_;
  Answer answer_;
};

Napi::Promise Queue(Napi::Env env, std::function<Answer()> job) {
  auto* worker = new Worker(env, std::move(job));
  worker->Queue();
  return worker->Promise();
}

// run(script: string, dryRun: boolean, json: boolean, timeoutMs: number): Promise<string>
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
  return Queue(env, [script = std::move(script), dry_run, json, timeout_ms]() {
    runner::Outcome outcome = runner::RunScript(script, dry_run, json, timeout_ms);
    if (!outcome.ok) return Failed(outcome.text, outcome.kind);
    return Value([text = outcome.text](Napi::Env env) { return Napi::String::New(env, text); });
  });
}

// generationId(): Promise<number>, NFTA_GEN_ID
Napi::Value GenerationId(const Napi::CallbackInfo& info) {
  return Queue(info.Env(), [] {
    netlink::GenerationId result = netlink::ReadGenerationId();
    if (!result.status.ok) return Failed(result.status.error);
    return Value([id = result.id](Napi::Env env) { return Napi::Number::New(env, id); });
  });
}

// listTables(): Promise<Array<{ family: string, name: string }>>, every table in the namespace
Napi::Value Tables(const Napi::CallbackInfo& info) {
  return Queue(info.Env(), [] {
    netlink::Tables result = netlink::ListTables();
    if (!result.status.ok) return Failed(result.status.error);
    return Value([tables = std::move(result.tables)](Napi::Env env) {
      Napi::Array array = Napi::Array::New(env, tables.size());
      for (size_t i = 0; i < tables.size(); i++) {
        Napi::Object table = Napi::Object::New(env);
        table.Set("family", tables[i].family);
        table.Set("name", tables[i].name);
        array.Set(static_cast<uint32_t>(i), table);
      }
      return array;
    });
  });
}

// The flush's result as JS: { seen, deleted: [[protocol, count]…], replies: [{ source,
// sourcePort, destination, destinationPort }…], error? }, addresses as inet_ntop prints them.
Napi::Value FlushValue(Napi::Env env, int af, const conntrack::FlushResult& result) {
  Napi::Object value = Napi::Object::New(env);
  value.Set("seen", Napi::Number::New(env, static_cast<double>(result.seen)));
  Napi::Array deleted = Napi::Array::New(env, result.deleted.size());
  for (size_t i = 0; i < result.deleted.size(); i++) {
    Napi::Array pair = Napi::Array::New(env, 2);
    pair.Set(0u, Napi::Number::New(env, result.deleted[i].first));
    pair.Set(1u, Napi::Number::New(env, static_cast<double>(result.deleted[i].second)));
    deleted.Set(static_cast<uint32_t>(i), pair);
  }
  value.Set("deleted", deleted);
  Napi::Array replies = Napi::Array::New(env);
  char source[INET6_ADDRSTRLEN], destination[INET6_ADDRSTRLEN];
  for (const auto& reply : result.replies) {
    if (!inet_ntop(af, reply.source.data(), source, sizeof source) ||
        !inet_ntop(af, reply.destination.data(), destination, sizeof destination))
      continue;
    Napi::Object tuple = Napi::Object::New(env);
    tuple.Set("source", source);
    tuple.Set("sourcePort", Napi::Number::New(env, reply.source_port));
    tuple.Set("destination", destination);
    tuple.Set("destinationPort", Napi::Number::New(env, reply.destination_port));
    replies.Set(replies.Length(), tuple);
  }
  value.Set("replies", replies);
  if (!result.ok) value.Set("error", result.error);
  return value;
}

// Pairs of first and last address (4 or 16 bytes each, network order), sorted, disjoint.
std::vector<conntrack::Range> RangesOf(Napi::Env env, Napi::Buffer<uint8_t> buffer, size_t width) {
  if (buffer.Length() % (2 * width) != 0)
    throw Napi::RangeError::New(env, "ranges must hold first/last address pairs");
  std::vector<conntrack::Range> ranges;
  for (size_t at = 0; at < buffer.Length(); at += 2 * width) {  // copied before queueing
    conntrack::Range range;
    memcpy(range.first.data(), buffer.Data() + at, width);
    memcpy(range.last.data(), buffer.Data() + at + width, width);
    ranges.push_back(range);
  }
  return ranges;
}

// conntrackFlush(family: 4 | 6, protocols: number[], ranges: Buffer, listOnly: boolean,
//                sources: Buffer, translatedOnly: boolean)
// ranges: of the reply's source; sources: of the original source, empty for any.
Napi::Value ConntrackFlush(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 6 || !info[0].IsNumber() || !info[1].IsArray() || !info[2].IsBuffer() ||
      !info[3].IsBoolean() || !info[4].IsBuffer() || !info[5].IsBoolean())
    throw Napi::TypeError::New(env,
                               "conntrackFlush(family: 4 | 6, protocols: number[], ranges: Buffer, "
                               "listOnly: boolean, sources: Buffer, translatedOnly: boolean)");
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
  size_t width = family == 4 ? 4 : 16;
  request.ranges = RangesOf(env, info[2].As<Napi::Buffer<uint8_t>>(), width);
  request.sources = RangesOf(env, info[4].As<Napi::Buffer<uint8_t>>(), width);
  request.translated_only = info[5].As<Napi::Boolean>().Value();
  return Queue(env, [request = std::move(request)]() {
    conntrack::FlushResult result = conntrack::Flush(request);
    const int af = request.family;
    return Value(
        [af, result = std::move(result)](Napi::Env env) { return FlushValue(env, af, result); });
  });
}

// Gives the C heap's free pages back to the system (glibc's malloc_trim): every thread that
// allocated (libuv's pool, V8's helpers) keeps an arena of its own, and their freed memory
// otherwise stays in the process's RSS. Returns whether anything was released.
Napi::Value ReleaseMemory(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), malloc_trim(0) == 1);
}

// Blocks of at least `bytes` get their own mapping, returned to the system when freed. glibc raises
// this threshold to the largest block freed so far unless it is set, so after a large config most
// blocks came from the arenas and stayed there (docs/design.md, "Memory").
Napi::Value MapLargeAllocations(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(info.Env(), "mapLargeAllocations(bytes)").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  return Napi::Boolean::New(
      info.Env(), mallopt(M_MMAP_THRESHOLD, info[0].As<Napi::Number>().Int32Value()) == 1);
}

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

// Asks the kernel to reclaim the resident pages of the process's file-backed mappings that no other
// process maps (MADV_PAGEOUT, Linux 5.4): the program's code and read-only data that a large
// config's work ran (the optimizing compiler, V8's compacting collector) stay resident otherwise,
// though an agent on a small config never runs them again. A hint only: a page is read back from
// its file when next used, and anonymous memory is left alone. It takes 15-140 ms, so it runs on a
// pool thread. Resolves with the bytes of the mappings advised (0: the kernel refused them all).
Napi::Value PageOutFileMappings(const Napi::CallbackInfo& info) {
  return Queue(info.Env(), []() {
    double advised = 0;
    FILE* maps = std::fopen("/proc/self/maps", "re");
    if (maps != nullptr) {
      char line[512];
      bool line_start = true;
      while (std::fgets(line, sizeof line, maps) != nullptr) {
        // A long path leaves the rest of its line for the next read: only a line's start counts.
        const bool at_start = line_start;
        line_start = std::strchr(line, '\n') != nullptr;
        if (!at_start) continue;
        unsigned long start = 0, end = 0, inode = 0;
        if (std::sscanf(line, "%lx-%lx %*s %*s %*s %lu", &start, &end, &inode) != 3) continue;
        // Anonymous mappings have no inode; nor do [vdso] and its kind.
        if (inode == 0 || end <= start) continue;
        if (madvise(reinterpret_cast<void*>(start), end - start, MADV_PAGEOUT) == 0)
          advised += static_cast<double>(end - start);
      }
      std::fclose(maps);
    }
    return Value([advised](Napi::Env env) { return Napi::Number::New(env, advised); });
  });
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("run", Napi::Function::New(env, Run));
  exports.Set("generationId", Napi::Function::New(env, GenerationId));
  exports.Set("listTables", Napi::Function::New(env, Tables));
  exports.Set("conntrackFlush", Napi::Function::New(env, ConntrackFlush));
  exports.Set("releaseMemory", Napi::Function::New(env, ReleaseMemory));
  exports.Set("mapLargeAllocations", Napi::Function::New(env, MapLargeAllocations));
  exports.Set("pageOutFileMappings", Napi::Function::New(env, PageOutFileMappings));
  exports.Set("version", Napi::String::New(env, "nftables-napi 2.0.0"));
  exports.Set("libnftablesVersion", Napi::String::New(env, LIBNFTABLES_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(nftables_napi, Init)

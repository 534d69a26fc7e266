// nftables_napi: the N-API glue over plain C++ layers that know nothing of N-API — runner
// (libnftables in a child forked per call), netlink (plain nf_tables requests), conntrack
// (libnetfilter_conntrack), route (rtnetlink lookups for it) and memory (what the agent gives
// back). Each call copies its arguments on the JS thread, runs its job on a pool thread through the
// one Worker, and resolves with JS values built back on the JS thread.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <napi.h>
#include <netinet/in.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "conntrack.h"
#include "element-audit.h"
#include "memory.h"
#include "nat-stats.h"
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

// run(script: string, dryRun: boolean, output: "text" | "json" | "listing", timeoutMs: number):
// Promise<string>
Napi::Value Run(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage =
      "run(script: string, dryRun: boolean, output: \"text\" | \"json\" | \"listing\", "
      "timeoutMs: number)";
  if (info.Length() != 4 || !info[0].IsString() || !info[1].IsBoolean() || !info[2].IsString() ||
      !info[3].IsNumber())
    throw Napi::TypeError::New(env, usage);
  std::string script = info[0].As<Napi::String>().Utf8Value();  // copied before queueing
  bool dry_run = info[1].As<Napi::Boolean>().Value();
  std::string name = info[2].As<Napi::String>().Utf8Value();
  runner::Output output = name == "json"      ? runner::Output::kJson
                          : name == "listing" ? runner::Output::kListing
                          : name == "text"    ? runner::Output::kText
                                              : throw Napi::TypeError::New(env, usage);
  int timeout_ms = info[3].As<Napi::Number>().Int32Value();
  if (timeout_ms <= 0) throw Napi::RangeError::New(env, "timeoutMs must be positive");
  return Queue(env, [script = std::move(script), dry_run, output, timeout_ms]() {
    runner::Outcome outcome = runner::RunScript(script, dry_run, output, timeout_ms);
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

// listChains(): Promise<Array<{ family, table, name, hook?: { name, priority, type } }>>
Napi::Value Chains(const Napi::CallbackInfo& info) {
  return Queue(info.Env(), [] {
    netlink::Chains result = netlink::ListChains();
    if (!result.status.ok) return Failed(result.status.error);
    return Value([chains = std::move(result.chains)](Napi::Env env) {
      Napi::Array array = Napi::Array::New(env, chains.size());
      for (size_t i = 0; i < chains.size(); i++) {
        const netlink::Chain& chain = chains[i];
        Napi::Object object = Napi::Object::New(env);
        object.Set("family", chain.family);
        object.Set("table", chain.table);
        object.Set("name", chain.name);
        if (chain.base) {
          Napi::Object hook = Napi::Object::New(env);
          hook.Set("name", chain.hook);
          hook.Set("priority", chain.priority);
          hook.Set("type", chain.type);
          object.Set("hook", hook);
        }
        array.Set(static_cast<uint32_t>(i), object);
      }
      return array;
    });
  });
}

// listRules(family: string, table: string, chain: string):
// Promise<Array<{ handle, translates, jumps, maps, mapJumps, expressions: string[], ports? }>>
Napi::Value Rules(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsString() || !info[1].IsString() || !info[2].IsString())
    throw Napi::TypeError::New(env, "listRules(family: string, table: string, chain: string)");
  std::string family = info[0].As<Napi::String>().Utf8Value();
  std::string table = info[1].As<Napi::String>().Utf8Value();
  std::string chain = info[2].As<Napi::String>().Utf8Value();
  return Queue(env,
               [family = std::move(family), table = std::move(table), chain = std::move(chain)] {
                 netlink::Rules result = netlink::ListRules(family, table, chain);
                 if (!result.status.ok) return Failed(result.status.error);
                 return Value([rules = std::move(result.rules)](Napi::Env env) {
                   auto strings = [env](const std::vector<std::string>& items) {
                     Napi::Array array = Napi::Array::New(env, items.size());
                     for (size_t i = 0; i < items.size(); i++)
                       array.Set(static_cast<uint32_t>(i), items[i]);
                     return array;
                   };
                   Napi::Array array = Napi::Array::New(env, rules.size());
                   for (size_t i = 0; i < rules.size(); i++) {
                     Napi::Object object = Napi::Object::New(env);
                     object.Set("handle", static_cast<double>(rules[i].handle));
                     object.Set("translates", rules[i].translates);
                     object.Set("jumps", strings(rules[i].jumps));
                     object.Set("maps", strings(rules[i].maps));
                     object.Set("mapJumps", strings(rules[i].map_jumps));
                     if (rules[i].port_min >= 0) {
                       Napi::Object ports = Napi::Object::New(env);
                       ports.Set("first", rules[i].port_min);
                       ports.Set("last", rules[i].port_max);
                       object.Set("ports", ports);
                     }
                     object.Set("expressions", strings(rules[i].expressions));
                     array.Set(static_cast<uint32_t>(i), object);
                   }
                   return array;
                 });
               });
}

// listCounters(family: string, table: string): Promise<Array<{ name, packets, bytes }>>
Napi::Value CountersOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsString() || !info[1].IsString())
    throw Napi::TypeError::New(env, "listCounters(family: string, table: string)");
  std::string family = info[0].As<Napi::String>().Utf8Value();
  std::string table = info[1].As<Napi::String>().Utf8Value();
  return Queue(env, [family = std::move(family), table = std::move(table)] {
    netlink::Counters result = netlink::ListCounters(family, table);
    if (!result.status.ok) return Failed(result.status.error);
    return Value([counters = std::move(result.counters)](Napi::Env env) {
      Napi::Array array = Napi::Array::New(env, counters.size());
      for (size_t i = 0; i < counters.size(); i++) {
        Napi::Object object = Napi::Object::New(env);
        object.Set("name", counters[i].name);
        // Exact up to 2^53: years of packets at line rate.
        object.Set("packets", static_cast<double>(counters[i].packets));
        object.Set("bytes", static_cast<double>(counters[i].bytes));
        array.Set(static_cast<uint32_t>(i), object);
      }
      return array;
    });
  });
}

// Pairs of first and last address (4 or 16 bytes each, network order), sorted, disjoint.
std::vector<conntrack::Range> RangesOf(Napi::Env env, Napi::Value value, size_t width) {
  if (!value.IsBuffer()) throw Napi::TypeError::New(env, "ranges must be a Buffer");
  auto buffer = value.As<Napi::Buffer<uint8_t>>();
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

// { sources: Buffer | null, interfaces: string[] | null, snat: Buffer | null } (null: any /
// masquerade)
conntrack::Policy PolicyOf(Napi::Env env, Napi::Value value, size_t width) {
  if (!value.IsObject()) throw Napi::TypeError::New(env, "a policy must be an object");
  Napi::Object object = value.As<Napi::Object>();
  conntrack::Policy policy;
  Napi::Value sources = object.Get("sources");
  if (!sources.IsNull()) {
    policy.any_source = false;
    policy.sources = RangesOf(env, sources, width);
  }
  Napi::Value interfaces = object.Get("interfaces");
  if (!interfaces.IsNull()) {
    if (!interfaces.IsArray()) throw Napi::TypeError::New(env, "interfaces must be an array");
    policy.any_interface = false;
    Napi::Array names = interfaces.As<Napi::Array>();
    for (uint32_t i = 0; i < names.Length(); i++) {
      Napi::Value name = names.Get(i);
      if (!name.IsString()) throw Napi::TypeError::New(env, "interface names must be strings");
      policy.interfaces.push_back(name.As<Napi::String>().Utf8Value());
    }
  }
  Napi::Value snat = object.Get("snat");
  if (!snat.IsNull()) {
    std::vector<conntrack::Range> range = RangesOf(env, snat, width);
    if (range.size() != 1) throw Napi::RangeError::New(env, "snat must be one range");
    policy.snat = true;
    policy.snat_range = range[0];
  }
  return policy;
}

// The plan of a judged flush lives in C++; JS holds it as an External until it is done with it.
using PlanRef = std::shared_ptr<conntrack::Plan>;

Napi::Value PlanValue(Napi::Env env, const PlanRef& plan) {
  Napi::Object value = Napi::Object::New(env);
  value.Set("seen", Napi::Number::New(env, static_cast<double>(plan->seen)));
  value.Set("unjudged", Napi::Number::New(env, static_cast<double>(plan->unjudged)));
  value.Set("now", Napi::Number::New(env, static_cast<double>(plan->now.size())));
  value.Set("later", Napi::Number::New(env, static_cast<double>(plan->later.size())));
  value.Set("hold", Napi::Number::New(env, static_cast<double>(plan->hold.size())));
  value.Set("plan", Napi::External<PlanRef>::New(env, new PlanRef(plan),
                                                 [](Napi::Env, PlanRef* ref) { delete ref; }));
  return value;
}

PlanRef PlanOf(Napi::Env env, Napi::Value value) {
  if (!value.IsExternal()) throw Napi::TypeError::New(env, "not a conntrack plan");
  return *value.As<Napi::External<PlanRef>>().Data();
}

// conntrackJudge({ family, protocols, lost, gained, policyChanged, exemptAfter, before, after,
// holdMax }) → Promise<{ seen, unjudged, now, later, hold, plan }>
Napi::Value ConntrackJudge(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsObject())
    throw Napi::TypeError::New(env, "conntrackJudge(request: object)");
  Napi::Object object = info[0].As<Napi::Object>();
  int family = object.Get("family").ToNumber().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  const size_t width = family == 4 ? 4 : 16;
  conntrack::JudgeRequest request;
  request.family = family == 4 ? AF_INET : AF_INET6;
  Napi::Value protocols = object.Get("protocols");
  if (!protocols.IsArray()) throw Napi::TypeError::New(env, "protocols must be an array");
  for (uint32_t i = 0; i < protocols.As<Napi::Array>().Length(); i++) {
    int protocol = protocols.As<Napi::Array>().Get(i).ToNumber().Int32Value();
    if (protocol < 0 || protocol > 255) throw Napi::RangeError::New(env, "protocols are 0-255");
    request.protocols.push_back(static_cast<uint8_t>(protocol));
  }
  request.lost = RangesOf(env, object.Get("lost"), width);
  request.gained = RangesOf(env, object.Get("gained"), width);
  request.policy_changed = object.Get("policyChanged").ToBoolean().Value();
  request.exempt_after = RangesOf(env, object.Get("exemptAfter"), width);
  request.before = PolicyOf(env, object.Get("before"), width);
  request.after = PolicyOf(env, object.Get("after"), width);
  double hold_max = object.Get("holdMax").ToNumber().DoubleValue();
  if (!(hold_max >= 0 && hold_max <= 1e6)) throw Napi::RangeError::New(env, "holdMax: 0-1e6");
  request.hold_max = static_cast<size_t>(hold_max);
  return Queue(env, [request = std::move(request)]() {
    conntrack::JudgeResult result = conntrack::Judge(request);
    if (!result.ok) return Failed(result.error);
    return Value([plan = result.plan](Napi::Env env) { return PlanValue(env, plan); });
  });
}

// natSample({ family: 4 | 6, cpuBudgetS, bySource, from: Buffer, to: Buffer }) → Promise<{
// complete, seen, translated, cpuS, protocols: [protocol, flows, busiest][], records?: { width,
// stride, count, data: Buffer } }>: the
// family's source-translated conntrack entries aggregated (nat-stats.h), on a pool thread.
Napi::Value NatSample(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsObject())
    throw Napi::TypeError::New(env, "natSample(request: object)");
  Napi::Object object = info[0].As<Napi::Object>();
  int family = object.Get("family").ToNumber().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  const size_t width = family == 4 ? 4 : 16;
  natstats::Request request;
  request.family = family == 4 ? AF_INET : AF_INET6;
  request.cpu_budget_s = object.Get("cpuBudgetS").ToNumber().DoubleValue();
  if (!(request.cpu_budget_s > 0 && request.cpu_budget_s <= 60))
    throw Napi::RangeError::New(env, "cpuBudgetS: above 0, at most 60");
  request.by_source = object.Get("bySource").ToBoolean().Value();
  request.from = RangesOf(env, object.Get("from"), width);
  request.to = RangesOf(env, object.Get("to"), width);
  return Queue(env, [request = std::move(request), family]() {
    natstats::Result result = natstats::Sample(request);
    if (!result.ok) return Failed(result.error);
    return Value([result = std::move(result), family](Napi::Env env) {
      Napi::Object answer = Napi::Object::New(env);
      answer.Set("complete", result.complete);
      answer.Set("seen", static_cast<double>(result.seen));
      answer.Set("translated", static_cast<double>(result.translated));
      answer.Set("cpuS", result.cpu_s);
      Napi::Array protocols = Napi::Array::New(env, result.protocols.size());
      uint32_t i = 0;
      for (const auto& [protocol, figures] : result.protocols) {
        Napi::Array row = Napi::Array::New(env, 3);
        row.Set(0u, protocol);
        row.Set(1u, static_cast<double>(figures.flows));
        row.Set(2u, static_cast<double>(figures.busiest));
        protocols.Set(i++, row);
      }
      answer.Set("protocols", protocols);
      if (result.flows) {
        // The records and their order, handed over without a copy (nat-stats.h, FlowRecords).
        const std::shared_ptr<natstats::FlowRecords>& flows = result.flows;
        const auto external = [env, &flows](void* data, size_t length) {
          if (length == 0) return Napi::Buffer<uint8_t>::New(env, 0);
          return Napi::Buffer<uint8_t>::New(
              env, static_cast<uint8_t*>(data), length,
              [](Napi::Env, uint8_t*, std::shared_ptr<natstats::FlowRecords>* held) {
                delete held;
              },
              new std::shared_ptr<natstats::FlowRecords>(flows));
        };
        Napi::Object records = Napi::Object::New(env);
        records.Set("width", static_cast<double>(family == 4 ? 4 : 16));
        records.Set("stride", static_cast<double>(flows->stride));
        records.Set("count", static_cast<double>(flows->count));
        records.Set("data", external(flows->data, flows->count * flows->stride));
        answer.Set("records", records);
      }
      return answer;
    });
  });
}

// conntrackHold(plan, family: 4 | 6, table: string, set: string) → Promise<number>: the plan's
// reply tuples replace what the set holds, each for the set's own timeout.
Napi::Value ConntrackHold(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[1].IsNumber() || !info[2].IsString() || !info[3].IsString())
    throw Napi::TypeError::New(env, "conntrackHold(plan, family: 4 | 6, table, set)");
  PlanRef plan = PlanOf(env, info[0]);
  int family = info[1].As<Napi::Number>().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  std::string table = info[2].As<Napi::String>().Utf8Value();
  std::string set = info[3].As<Napi::String>().Utf8Value();
  return Queue(env, [plan, family, table, set]() {
    // The set's key, `ADDR saddr . udp sport . ADDR daddr . udp dport`: each part in network
    // order, padded to 4 bytes.
    const size_t width = family == 4 ? 4 : 16;
    std::vector<std::vector<uint8_t>> keys;
    keys.reserve(plan->hold.size());
    for (const auto& reply : plan->hold) {
      std::vector<uint8_t> key(2 * width + 8, 0);
      const uint16_t source_port = htons(reply.source_port);
      const uint16_t destination_port = htons(reply.destination_port);
      memcpy(key.data(), reply.source.data(), width);
      memcpy(key.data() + width, &source_port, 2);
      memcpy(key.data() + width + 4, reply.destination.data(), width);
      memcpy(key.data() + 2 * width + 4, &destination_port, 2);
      keys.push_back(std::move(key));
    }
    netlink::Status status = netlink::ReplaceSetElements(
        static_cast<uint8_t>(family == 4 ? AF_INET : AF_INET6), table, set, keys);
    if (!status.ok) return Failed(status.error);
    const double held = static_cast<double>(keys.size());
    return Value([held](Napi::Env env) { return Napi::Number::New(env, held); });
  });
}

// conntrackDelete(plan, which: 'now' | 'later') → Promise<{ deleted: [[protocol, count]…], error?
// }>
Napi::Value ConntrackDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[1].IsString())
    throw Napi::TypeError::New(env, "conntrackDelete(plan, which: 'now' | 'later')");
  PlanRef plan = PlanOf(env, info[0]);
  std::string which = info[1].As<Napi::String>().Utf8Value();
  if (which != "now" && which != "later")
    throw Napi::RangeError::New(env, "which must be 'now' or 'later'");
  return Queue(env, [plan, later = which == "later"]() {
    conntrack::DeleteResult result = conntrack::Delete(later ? plan->later : plan->now);
    return Value([result = std::move(result)](Napi::Env env) {
      Napi::Object value = Napi::Object::New(env);
      Napi::Array deleted = Napi::Array::New(env, result.deleted.size());
      for (size_t i = 0; i < result.deleted.size(); i++) {
        Napi::Array pair = Napi::Array::New(env, 2);
        pair.Set(0u, Napi::Number::New(env, result.deleted[i].first));
        pair.Set(1u, Napi::Number::New(env, static_cast<double>(result.deleted[i].second)));
        deleted.Set(static_cast<uint32_t>(i), pair);
      }
      value.Set("deleted", deleted);
      if (!result.ok) value.Set("error", result.error);
      return value;
    });
  });
}

// editElements({ generation?, tables: [{ family: 4 | 6, table, chain, wasMark, mark, sets: [{
// name, keyLength, interval, refill, marker, removed: Buffer, added: Buffer }] }] }) →
// Promise<undefined>: netlink::EditElements, one transaction (docs/writes.md, "The everyday edit").
// A table whose `chain` is "" moves no mark: the fill of sets made for a change on new sets.
Napi::Value EditElements(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage =
      "editElements({ generation?, tables: [{ family, table, chain, wasMark, mark, sets: [{ name, "
      "keyLength, interval, refill, marker, removed, added }] }] })";
  if (info.Length() != 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, usage);
  Napi::Object request = info[0].As<Napi::Object>();
  const auto object = [&](Napi::Value value) {
    if (!value.IsObject()) throw Napi::TypeError::New(env, usage);
    return value.As<Napi::Object>();
  };
  const auto array = [&](Napi::Value value) {
    if (!value.IsArray()) throw Napi::TypeError::New(env, usage);
    return value.As<Napi::Array>();
  };
  const auto text = [&](Napi::Object from, const char* key) {
    Napi::Value value = from.Get(key);
    if (!value.IsString()) throw Napi::TypeError::New(env, usage);
    return value.As<Napi::String>().Utf8Value();
  };
  const auto bytes = [&](Napi::Value value) {  // copied before queueing
    if (!value.IsBuffer()) throw Napi::TypeError::New(env, usage);
    auto buffer = value.As<Napi::Buffer<uint8_t>>();
    return std::vector<uint8_t>(buffer.Data(), buffer.Data() + buffer.Length());
  };
  netlink::ElementEdit edit;
  Napi::Value generation = request.Get("generation");
  if (generation.IsNumber()) {
    edit.pinned = true;
    edit.generation = generation.As<Napi::Number>().Uint32Value();
  }
  Napi::Array tables = array(request.Get("tables"));
  for (uint32_t t = 0; t < tables.Length(); t++) {
    Napi::Object from = object(tables.Get(t));
    netlink::TableEdit table;
    const int family = from.Get("family").ToNumber().Int32Value();
    if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
    table.family = static_cast<uint8_t>(family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6);
    table.table = text(from, "table");
    table.chain = text(from, "chain");
    table.was_mark = text(from, "wasMark");
    table.mark = text(from, "mark");
    Napi::Array sets = array(from.Get("sets"));
    for (uint32_t i = 0; i < sets.Length(); i++) {
      Napi::Object set = object(sets.Get(i));
      netlink::SetEdit one;
      one.set = text(set, "name");
      one.key_len = set.Get("keyLength").ToNumber().Uint32Value();
      one.removed = bytes(set.Get("removed"));
      one.added = bytes(set.Get("added"));
      one.interval = set.Get("interval").ToBoolean().Value();
      one.refill = set.Get("refill").ToBoolean().Value();
      one.marker = set.Get("marker").ToBoolean().Value();
      if (one.key_len == 0 || one.key_len > 64 || one.removed.size() % (2 * one.key_len) != 0 ||
          one.added.size() % (2 * one.key_len) != 0)
        throw Napi::RangeError::New(env, "each element is its key and end key, keyLength each");
      table.sets.push_back(std::move(one));
    }
    edit.tables.push_back(std::move(table));
  }
  return Queue(env, [edit = std::move(edit)]() {
    netlink::Status status = netlink::EditElements(edit);
    if (!status.ok) return Failed(status.error);
    return Value([](Napi::Env env) { return env.Undefined(); });
  });
}

// auditSet({ family: 4 | 6, table, set, concat, expected }): Promise<{ held, meant, missingCount,
// extraCount, missing, extra }>: the set read back over netlink and compared with `expected`, the
// agent's prefixes one per line (audit::AuditSet), on a pool thread.
Napi::Value AuditSet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "auditSet({ family: 4 | 6, table, set, concat, expected })";
  if (info.Length() != 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, usage);
  Napi::Object request = info[0].As<Napi::Object>();
  const auto text = [&](const char* key) {
    Napi::Value value = request.Get(key);
    if (!value.IsString()) throw Napi::TypeError::New(env, usage);
    return value.As<Napi::String>().Utf8Value();
  };
  const int family = request.Get("family").ToNumber().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  std::string table = text("table");
  std::string set = text("set");
  std::string expected = text("expected");
  const bool concat = request.Get("concat").ToBoolean().Value();
  return Queue(env, [family, table = std::move(table), set = std::move(set), concat,
                     expected = std::move(expected)] {
    audit::SetAudit result = audit::AuditSet(family, table, set, concat, expected);
    if (!result.status.ok) return Failed(result.status.error);
    return Value([result = std::move(result)](Napi::Env env) {
      Napi::Object object = Napi::Object::New(env);
      object.Set("held", static_cast<double>(result.held));
      object.Set("meant", static_cast<double>(result.meant));
      object.Set("missingCount", static_cast<double>(result.missing_count));
      object.Set("extraCount", static_cast<double>(result.extra_count));
      const auto strings = [&](const std::vector<std::string>& list) {
        Napi::Array array = Napi::Array::New(env, list.size());
        for (size_t i = 0; i < list.size(); i++) array.Set(static_cast<uint32_t>(i), list[i]);
        return array;
      };
      object.Set("missing", strings(result.missing));
      object.Set("extra", strings(result.extra));
      return object;
    });
  });
}

// ruleComments(family: 4 | 6, table: string, chain: string): Promise<string[]>, the comments of
// the chain's rules in order ("" for none), over netlink.
Napi::Value RuleComments(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsString() || !info[2].IsString())
    throw Napi::TypeError::New(env, "ruleComments(family: 4 | 6, table: string, chain: string)");
  const int family = info[0].As<Napi::Number>().Int32Value();
  if (family != 4 && family != 6) throw Napi::RangeError::New(env, "family must be 4 or 6");
  std::string table = info[1].As<Napi::String>().Utf8Value();
  std::string chain = info[2].As<Napi::String>().Utf8Value();
  return Queue(env, [family, table = std::move(table), chain = std::move(chain)] {
    netlink::Comments result = netlink::RuleComments(
        static_cast<uint8_t>(family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6), table, chain);
    if (!result.status.ok) return Failed(result.status.error);
    return Value([comments = std::move(result.comments)](Napi::Env env) {
      Napi::Array array = Napi::Array::New(env, comments.size());
      for (size_t i = 0; i < comments.size(); i++) array.Set(static_cast<uint32_t>(i), comments[i]);
      return array;
    });
  });
}

// monitorOpen(): number, a socket hearing nf_tables' notifications (netlink::OpenMonitor); throws
// when it cannot be made. Quick: on the JS thread, as are the three below.
Napi::Value MonitorOpen(const Napi::CallbackInfo& info) {
  netlink::Monitor monitor = netlink::OpenMonitor();
  if (!monitor.status.ok) {
    Napi::Error::New(info.Env(), monitor.status.error).ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  return Napi::Number::New(info.Env(), monitor.fd);
}

// monitorDrain(fd): { commits: Array<{ genId, tables: string[], capped }>, overflow }, what the
// socket holds now, never waiting (netlink::DrainMonitor).
Napi::Value MonitorDrain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "monitorDrain(fd)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  netlink::Heard heard = netlink::DrainMonitor(info[0].As<Napi::Number>().Int32Value());
  if (!heard.status.ok) {
    Napi::Error::New(env, heard.status.error).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array commits = Napi::Array::New(env, heard.commits.size());
  for (size_t i = 0; i < heard.commits.size(); i++) {
    const netlink::Commit& commit = heard.commits[i];
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("genId", Napi::Number::New(env, commit.gen_id));
    Napi::Array tables = Napi::Array::New(env, commit.tables.size());
    for (size_t j = 0; j < commit.tables.size(); j++)
      tables.Set(static_cast<uint32_t>(j), commit.tables[j]);
    entry.Set("tables", tables);
    entry.Set("capped", Napi::Boolean::New(env, commit.capped));
    commits.Set(static_cast<uint32_t>(i), entry);
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("commits", commits);
  result.Set("overflow", Napi::Boolean::New(env, heard.overflow));
  return result;
}

// monitorMute(fd, mute: boolean): undefined, netlink::MuteMonitor; throws when it fails.
Napi::Value MonitorMute(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsBoolean()) {
    Napi::TypeError::New(env, "monitorMute(fd, mute)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  netlink::Status status = netlink::MuteMonitor(info[0].As<Napi::Number>().Int32Value(),
                                                info[1].As<Napi::Boolean>().Value());
  if (!status.ok) Napi::Error::New(env, status.error).ThrowAsJavaScriptException();
  return env.Undefined();
}

// monitorClose(fd): undefined
Napi::Value MonitorClose(const Napi::CallbackInfo& info) {
  if (info.Length() >= 1 && info[0].IsNumber())
    netlink::CloseMonitor(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// releaseMemory(): boolean, memory::ReleaseFreePages (quick: on the JS thread)
Napi::Value ReleaseMemory(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), memory::ReleaseFreePages());
}

// mapLargeAllocations(bytes: number): boolean, memory::MapBlocksFrom
Napi::Value MapLargeAllocations(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber())
    throw Napi::TypeError::New(info.Env(), "mapLargeAllocations(bytes)");
  return Napi::Boolean::New(info.Env(),
                            memory::MapBlocksFrom(info[0].As<Napi::Number>().Int32Value()));
}

// pageOutFileMappings(): Promise<number>, memory::PageOutFileMappings on a pool thread
Napi::Value PageOutFileMappings(const Napi::CallbackInfo& info) {
  return Queue(info.Env(), []() {
    const double advised = memory::PageOutFileMappings();
    return Value([advised](Napi::Env env) { return Napi::Number::New(env, advised); });
  });
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("run", Napi::Function::New(env, Run));
  exports.Set("generationId", Napi::Function::New(env, GenerationId));
  exports.Set("listTables", Napi::Function::New(env, Tables));
  exports.Set("listChains", Napi::Function::New(env, Chains));
  exports.Set("listRules", Napi::Function::New(env, Rules));
  exports.Set("listCounters", Napi::Function::New(env, CountersOf));
  exports.Set("conntrackJudge", Napi::Function::New(env, ConntrackJudge));
  exports.Set("natSample", Napi::Function::New(env, NatSample));
  exports.Set("conntrackHold", Napi::Function::New(env, ConntrackHold));
  exports.Set("conntrackDelete", Napi::Function::New(env, ConntrackDelete));
  exports.Set("editElements", Napi::Function::New(env, EditElements));
  exports.Set("auditSet", Napi::Function::New(env, AuditSet));
  exports.Set("ruleComments", Napi::Function::New(env, RuleComments));
  exports.Set("monitorOpen", Napi::Function::New(env, MonitorOpen));
  exports.Set("monitorDrain", Napi::Function::New(env, MonitorDrain));
  exports.Set("monitorMute", Napi::Function::New(env, MonitorMute));
  exports.Set("monitorClose", Napi::Function::New(env, MonitorClose));
  exports.Set("releaseMemory", Napi::Function::New(env, ReleaseMemory));
  exports.Set("mapLargeAllocations", Napi::Function::New(env, MapLargeAllocations));
  exports.Set("pageOutFileMappings", Napi::Function::New(env, PageOutFileMappings));
  exports.Set("version", Napi::String::New(env, "nftables-napi 2.1.0"));
  exports.Set("libnftablesVersion", Napi::String::New(env, LIBNFTABLES_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(nftables_napi, Init)

#include "torture/orchestrator.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/backend_registry.h"
#include "fencelock/client.h"
#include "private_files.h"
#include "torture/child_processes.h"
#include "torture/endpoints.h"
#include "torture/fault_proxy.h"
#include "torture/faults.h"
#include "torture/server_probe.h"
#include "torture/shared_register.h"

namespace fencelock::torture {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

bool wanted(const std::vector<std::string>& faults, Fault fault) {
  return std::any_of(faults.begin(), faults.end(),
                     [&](const std::string& name) { return is_fault(name, fault); });
}

// Whether any of `faults` has the property `has` (faults.h).
bool any_fault(const std::vector<std::string>& faults, bool FaultSpec::*has) {
  return std::any_of(faults.begin(), faults.end(), [&](const std::string& name) {
    const FaultSpec* spec = find_fault(name);
    return spec != nullptr && spec->*has;
  });
}

// The kind argument of `PROGRAM admin-delete KIND KEY` for a backend URI.
std::string admin_kind(const std::string& uri) {
  const detail::BackendPlugin* plugin = detail::find_backend_plugin(uri);
  if (plugin == nullptr || plugin->family == "memory") return "";
  if (plugin->family == "postgres")
    return uri.find("mode=lease") != std::string::npos ? "postgres-lease" : "postgres-advisory";
  return std::string(plugin->family);
}

struct ActiveFault {
  InjectedFault record;
  Clock::time_point heal_at;
  std::optional<int> paused_worker;
  std::optional<int> skewed_worker;
  std::optional<int> jumped_worker;
  std::optional<HostPort> restart_server;  // server-kill: the killed server
  std::optional<HostPort> resume_server;   // minority-stall: the paused server
  bool racing = false;                     // cancel-race: the workers were told to race
  std::uint64_t proxy_actions_before = 0;
};

class Orchestrator {
 public:
  Orchestrator(RunSettings settings, const std::string& uri, std::string dir)
      : settings_(std::move(settings)),
        dir_(std::move(dir)),
        uri_(uri),
        control_(settings_.server_control, dir_ + "/server-control.log") {
    // many-leases is a condition of the whole run, not an injection on the schedule.
    for (const std::string& f : settings_.faults) {
      const FaultSpec* spec = find_fault(f);
      if (spec == nullptr) throw std::invalid_argument(fmt::format("unknown fault '{}'", f));
      if (spec->scheduled) scheduled_.push_back(spec);
    }
    reg_ = std::make_unique<SharedRegister>(dir_ + "/register.sock", settings_.fence);
    if (any_fault(settings_.faults, &FaultSpec::clock)) {
      faketime_ = kFaketime;
      if (!std::filesystem::exists(faketime_)) {
        throw std::invalid_argument(fmt::format(
            "clock faults (skew, jump) need libfaketime at {}: apt-get install faketime",
            faketime_));
      }
    }
    worker_uri_ = uri;
    for (const std::string& kind : settings_.faults) {
      if (find_fault(kind)->server_control && settings_.server_control.empty()) {
        throw std::invalid_argument(
            fmt::format("the fault {} needs --server-control PROGRAM (e.g. scripts/servers.sh "
                        "for its local servers)",
                        kind));
      }
    }
    if (wanted(settings_.faults, Fault::kEvict) && probe_protocol(uri) != ProbeProtocol::kRedis) {
      throw std::invalid_argument("the fault evict needs a redis:// or redlock:// backend");
    }
    if (wanted(settings_.faults, Fault::kAdminDelete) && admin_kind(uri).empty()) {
      throw std::invalid_argument("the fault admin-delete knows redis, redlock, etcd and postgres");
    }
    if (wanted(settings_.faults, Fault::kFailover) &&
        probe_protocol(uri) != ProbeProtocol::kPostgres) {
      throw std::invalid_argument(
          "the fault failover needs a postgres:// URI that names the primary first and its "
          "standby (host1,host2 with target_session_attrs=read-write)");
    }
    if (any_fault(settings_.faults, &FaultSpec::on_servers)) {
      auto split = split_uri(uri);
      if (!split.ok()) throw std::invalid_argument(split.status().message());
      servers_ = split->hosts;
      protocol_ = probe_protocol(uri).value_or(ProbeProtocol::kRedis);
    }
    if (any_fault(settings_.faults, &FaultSpec::through_proxy)) {
      auto split = split_uri(uri);
      if (!split.ok()) throw std::invalid_argument(split.status().message());
      for (auto& host : split->hosts) {
        proxies_.push_back(std::make_unique<FaultProxy>(host.host, host.port));
        host = HostPort{"127.0.0.1", proxies_.back()->port()};
      }
      worker_uri_ = join_uri(*split);
    }
  }

  RunRecord run(const std::function<void(const RunRecord&, double)>& progress,
                std::stop_token stop) {
    RunRecord record;
    record.started_at = monotonic_now();
    for (int id = 0; id < settings_.workers; ++id)
      workers_.push_back(
          std::make_unique<WorkerProcess>(id, worker_argv(id), worker_uri_, clock_env(id)));
    const auto start = Clock::now(), end = start + settings_.duration;
    const milliseconds interval = std::max(settings_.ttl, milliseconds(500));
    auto next_fault = start + interval;
    auto next_progress = start + milliseconds(1000);
    std::size_t fault_index = 0;
    std::optional<ActiveFault> active;
    while (Clock::now() < end && !stop.stop_requested()) {
      std::this_thread::sleep_for(milliseconds(20));
      const auto now = Clock::now();
      if (active && now >= active->heal_at) {
        heal(*active, record);
        active.reset();
        next_fault = now + interval;
      }
      // many-leases: the faults wait (at most half the run) until every worker holds its extra
      // leases, so that a fault does not stall their acquisition and the run tests the condition.
      if (!extras_ready_ && now >= next_fault) {
        extras_ready_ = !wanted(settings_.faults, Fault::kManyLeases) ||
                        workers_holding_extras() == settings_.workers ||
                        now >= start + settings_.duration / 2;
        if (!extras_ready_) next_fault = now + milliseconds(200);
      }
      if (extras_ready_ && !active && !scheduled_.empty() && now >= next_fault &&
          now + settings_.ttl * 2 < end) {
        active = inject(*scheduled_[fault_index++ % scheduled_.size()], record);
      }
      if (now >= next_progress) {
        next_progress = now + milliseconds(1000);
        record.operations_so_far = reg_->operation_count();
        progress(record, std::chrono::duration<double>(now - start) /
                             std::chrono::duration<double>(settings_.duration));
      }
    }
    if (active) heal(*active, record);
    for (auto& w : workers_) w->signal(SIGTERM);
    for (auto& w : workers_) {
      if (!w->wait_for(settings_.ttl * 2 + milliseconds(10'000))) w->kill_and_reap();
    }
    record.ended_at = monotonic_now();
    record.register_events = reg_->events();
    record.grant_log = grants_of(record.register_events);
    record.left_held = held_after_run(record.grant_log);
    record.final_value = reg_->value();
    record.control_failures = control_.failures();
    read_worker_logs(record);
    if (wanted(settings_.faults, Fault::kManyLeases)) record.faults.push_back(many_leases(record));
    races_seen(record);
    write_history(record);
    return record;
  }

 private:
  // After every worker has exited (released, or killed): whether the lock is still held, and by
  // whom. A holder left by a killed worker expires within a TTL; one still there a TTL later is
  // a lock held by nobody ("" when free, or when it cannot be inspected: then it says so).
  // Only a holder with a token granted in this run counts: a squatter that held the key all
  // along (the run is then INCONCLUSIVE) is not the run's leak.
  std::string held_after_run(const std::vector<GrantRecord>& grants) const {
    auto client = Client::connect(uri_);
    if (!client.ok()) return "";
    const auto key = *LockKey::make(settings_.key);
    std::string holder;
    for (auto until = Clock::now() + settings_.ttl + milliseconds(1000);;) {
      auto seen = client->inspect(key);
      if (!seen.ok() || !seen->has_value()) return "";
      // A holder without a token (a foreign client's) is none of the workers' grants.
      if (!(*seen)->token) return "";
      const std::uint64_t token = (*seen)->token->value();
      if (std::none_of(grants.begin(), grants.end(),
                       [&](const GrantRecord& g) { return g.token == token; })) {
        return "";
      }
      holder = fmt::format(
          "'{}' still held by {} (token {}) after every worker exited", settings_.key,
          (*seen)->owner_prefix.empty() ? "another session" : (*seen)->owner_prefix, token);
      if (Clock::now() >= until) return holder;
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  // A cancel-race took effect when some worker's wait ended (timed out or cancelled) inside it.
  void races_seen(RunRecord& record) const {
    std::vector<Nanos> ends;
    for (int id = 0; id < settings_.workers; ++id) {
      std::ifstream in(log_of(id));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.value("t", "") == "race") ends.push_back(j.value("at", Nanos{0}));
      }
    }
    for (InjectedFault& f : record.faults) {
      if (!is_fault(f.kind, Fault::kCancelRace)) continue;
      const auto n = std::count_if(ends.begin(), ends.end(),
                                   [&](Nanos at) { return at >= f.at && at <= f.healed_at; });
      f.took_effect = n > 0;
      f.note = fmt::format("{} waits ended by a timeout or cancel inside it", n);
    }
  }

  // How many workers logged that they hold all their extra leases.
  int workers_holding_extras() const {
    int holding = 0;
    for (int id = 0; id < settings_.workers; ++id) {
      std::ifstream in(log_of(id));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.value("t", "") == "extra" &&
            j.value("held", 0) >= settings_.extra_leases) {
          ++holding;
          break;
        }
      }
    }
    return holding;
  }

  // The many-leases condition as one fault record: it took effect when every worker said it held
  // all its extra leases.
  InjectedFault many_leases(const RunRecord& record) const {
    InjectedFault f;
    f.kind = fault_name(Fault::kManyLeases);
    f.at = record.started_at;
    f.healed_at = record.ended_at;
    const int holding = workers_holding_extras();
    f.took_effect = holding == settings_.workers;
    f.note = fmt::format("{} of {} workers held {} extra leases", holding, settings_.workers,
                         settings_.extra_leases);
    return f;
  }

  // How long a probe waits for a reaction: long enough for a loaded server to answer, short
  // enough to end inside the shortest fault (1.5 TTL).
  milliseconds probe_deadline() const {
    return std::clamp(settings_.ttl / 2, milliseconds(100), milliseconds(500));
  }
  // How long a server may take to answer again after a resume or a restart.
  milliseconds answer_limit() const { return std::max(settings_.ttl, milliseconds(2000)); }

  // INFO of one Redis; what could not be read goes into the fault's note.
  std::optional<RedisMemory> memory_of(const HostPort& server, InjectedFault& fault) const {
    std::string why;
    auto memory = redis_memory(server, uri_, probe_deadline(), why);
    if (!memory && fault.note.find(why) == std::string::npos)
      fault.note += (fault.note.empty() ? "" : "; ") + why;
    return memory;
  }

  // Who holds the lock now, by inspect(): its owner prefix ("" when free, or when it cannot be
  // inspected) and token (0: none known). One Client, connected on first use.
  std::pair<std::string, std::uint64_t> holder_now() {
    if (!inspector_) {
      auto client = Client::connect(uri_);
      if (!client.ok()) return {"", 0};
      inspector_.emplace(std::move(*client));
    }
    auto seen = inspector_->inspect(*LockKey::make(settings_.key));
    if (!seen.ok() || !seen->has_value()) return {"", 0};
    return {(*seen)->owner_prefix.empty() ? "?" : (*seen)->owner_prefix,
            (*seen)->token ? (*seen)->token->value() : 0};
  }

  // admin-delete: a worker that has been between its read and its write for a while (a long
  // critical section, seen continuously), waiting up to one TTL; else any worker inside. The
  // delete then lands on a lease its holder keeps using, and the holder must learn of it.
  std::optional<int> long_holder() const {
    const auto long_enough = std::min(settings_.critical * 4, settings_.ttl / 4);
    std::optional<int> seen;
    auto since = Clock::now();
    for (const auto until = since + settings_.ttl; Clock::now() < until;
         std::this_thread::sleep_for(milliseconds(2))) {
      const std::optional<int> now = reg_->worker_between_read_and_write();
      if (now != seen) {
        seen = now;
        since = Clock::now();
      } else if (now && Clock::now() - since >= long_enough) {
        return now;
      }
    }
    return reg_->worker_inside();
  }

  std::uint64_t proxy_actions() const {
    std::uint64_t total = 0;
    for (const auto& p : proxies_) total += p->fault_actions();
    return total;
  }

  std::string log_of(int id) const { return fmt::format("{}/worker-{}.log", dir_, id); }
  std::string clock_file(int id) const { return fmt::format("{}/clock-{}", dir_, id); }

  // With clock faults every worker runs under libfaketime, reading its wall-clock offset from
  // its clock file (re-read every second); the monotonic clock stays real.
  std::vector<std::string> clock_env(int id) const {
    if (faketime_.empty()) return {};
    (void)cli::replace_file(clock_file(id), "+0\n");
    return {"LD_PRELOAD=" + faketime_, "FAKETIME_TIMESTAMP_FILE=" + clock_file(id),
            "FAKETIME_CACHE_DURATION=1", "FAKETIME_DONT_FAKE_MONOTONIC=1", "DONT_FAKE_MONOTONIC=1"};
  }

  std::vector<std::string> worker_argv(int id) const {
    return {
        "fencelock",
        "torture-worker",
        "--socket",
        reg_->path(),
        "--log",
        log_of(id),
        "--id",
        std::to_string(id),
        "--ttl-ms",
        std::to_string(settings_.ttl.count()),
        "--critical-ms",
        std::to_string(settings_.critical.count()),
        "--key",
        settings_.key,
        "--extra-leases",
        std::to_string(wanted(settings_.faults, Fault::kManyLeases) ? settings_.extra_leases : 0),
        "--api",
        settings_.async_api ? "async" : "blocking"};
  }

  ActiveFault inject(const FaultSpec& spec, RunRecord& record) {
    ActiveFault fault;
    fault.record.kind = spec.name;
    fault.record.at = monotonic_now();
    fault.heal_at = Clock::now();
    fault.proxy_actions_before = proxy_actions();
    const auto pick = [&] {
      return reg_->worker_inside().value_or(static_cast<int>(record.faults.size()) %
                                            settings_.workers);
    };
    const auto hit = [&](int worker) -> WorkerProcess& {
      fault.record.worker = worker;
      fault.record.pid = workers_[static_cast<std::size_t>(worker)]->pid();
      return *workers_[static_cast<std::size_t>(worker)];
    };
    switch (spec.fault) {
      case Fault::kPause: {
        // Wait (a little) for a holder between its read and its write: the GC pause that hurts.
        for (int i = 0; i < 500 && !reg_->worker_between_read_and_write(); ++i)
          std::this_thread::sleep_for(milliseconds(2));
        fault.paused_worker = pick();
        WorkerProcess& w = hit(*fault.paused_worker);
        fault.record.at = monotonic_now();  // the pause window starts here, not before the wait
        w.signal(SIGSTOP);
        for (int i = 0; i < 100 && !fault.record.took_effect; ++i) {
          fault.record.took_effect = w.stopped();
          if (!fault.record.took_effect) std::this_thread::sleep_for(milliseconds(1));
        }
        if (!fault.record.took_effect) fault.record.note = "the process was never seen stopped";
        fault.heal_at += settings_.ttl * 3 / 2;
        break;
      }
      case Fault::kKill: {
        WorkerProcess& w = hit(pick());
        fault.record.took_effect = w.kill_and_reap();
        if (!fault.record.took_effect) fault.record.note = "the worker had already exited";
        w.start();
        break;
      }
      case Fault::kSkew: {
        // Restarted with a clock (monotonic and wall) running at a quarter of the real rate: its
        // renewals come too late and its own idea of validity is 4x too long, so its first (long)
        // critical section outlives its lease. Healed by a restart with the real clock.
        fault.skewed_worker = pick();
        WorkerProcess& w = hit(*fault.skewed_worker);
        w.kill_and_reap();
        w.start({"LD_PRELOAD=" + faketime_, "FAKETIME=+0 x0.25", "FAKETIME_DONT_FAKE_MONOTONIC=0",
                 "DONT_FAKE_MONOTONIC=0", "FAKETIME_TIMESTAMP_FILE="});
        fault.record.pid = w.pid();  // the skewed process (its clock shows the skew: checker)
        fault.heal_at += settings_.ttl * 5;
        break;
      }
      case Fault::kJump: {
        // The wall clock of one worker steps back 30 s (as an NTP step would); CLOCK_MONOTONIC
        // does not move. fencelock must not care (Redis FIFO tickets use the wall clock: fairness
        // may suffer, never safety).
        fault.jumped_worker = pick();
        hit(*fault.jumped_worker);
        (void)cli::replace_file(clock_file(*fault.jumped_worker), "-30s\n");
        fault.heal_at += settings_.ttl * 2;
        break;
      }
      case Fault::kServerKill: {
        // One server at a time (a minority of a cluster), crashed and restarted one TTL later.
        // Evidence (checker): the port refuses connections after the kill (polled a moment, for
        // a server that takes that long to go) and answers again after the restart.
        const HostPort& victim = servers_[record.faults.size() % servers_.size()];
        fault.record.took_effect = control_.run({"kill", std::to_string(victim.port)});
        if (fault.record.took_effect) {
          fault.record.probe_during = probe_until(victim, protocol_, ProbeResult::kRefused,
                                                  probe_deadline(), milliseconds(1000));
        } else {
          fault.record.note = "the control program's kill failed";
        }
        fault.restart_server = victim;
        fault.heal_at += settings_.ttl;
        break;
      }
      case Fault::kFailover: {
        // The primary (the URI's first host) crashed after 4 TTL of stalled replication and its
        // standby promoted (PROGRAM failover PORT LAG): with asynchronous replication the standby
        // lacks the commits of the stall. A lost commit shows as a repeated token only when the
        // workers drew more tokens in the stall than a PostgreSQL sequence logs ahead (32): each
        // grant draws one (lease mode draws none for a refused attempt), so 4 TTL must hold more
        // than 32 grants (a TTL of 6 s at a few grants a second). Once per run: the old primary
        // stays down.
        const HostPort& primary = servers_.front();
        const bool failed_over = control_.run(
            {"failover", std::to_string(primary.port),
             fmt::format("{:.3f}", std::chrono::duration<double>(settings_.ttl * 4).count())});
        fault.record.done_at = monotonic_now();  // `at`: when replication stalled
        fault.record.took_effect = failed_over;
        if (failed_over) {
          // Evidence (checker): the old primary refuses connections, its standby answers.
          fault.record.probe_during = probe_until(primary, protocol_, ProbeResult::kRefused,
                                                  probe_deadline(), milliseconds(1000));
          fault.record.probe_after =
              servers_.size() < 2 ? ProbeResult::kUnknown
                                  : probe_until(servers_[1], protocol_, ProbeResult::kAnswered,
                                                probe_deadline(), answer_limit());
        } else {
          fault.record.note = "the control program's failover failed";
        }
        std::erase(scheduled_, &spec);
        fault.heal_at = Clock::now() + settings_.ttl * 2;
        break;
      }
      case Fault::kMinorityStall: {
        // One server at a time stops answering (SIGSTOP): connections stay open, nothing comes
        // back. Resumed 1.5 TTL later.
        // Evidence (checker): a probe after the pause goes unanswered, one after the resume is
        // answered.
        const HostPort& victim = servers_[record.faults.size() % servers_.size()];
        fault.record.took_effect = control_.run({"pause", std::to_string(victim.port)});
        if (fault.record.took_effect) {
          fault.record.probe_during = probe_server(victim, protocol_, probe_deadline());
        } else {
          fault.record.note = "the control program's pause failed";
        }
        fault.resume_server = victim;
        fault.heal_at += settings_.ttl * 3 / 2;
        break;
      }
      case Fault::kAdminDelete: {
        // The lock taken away behind a holder's back, as an operator would; the holder must learn
        // within a renewal period (checker).
        // Evidence (checker): the lock is inspected just before and just after, so that a delete
        // its holder never learns of still shows.
        if (auto inside = long_holder()) hit(*inside);
        std::tie(fault.record.holder_before, fault.record.token_before) = holder_now();
        fault.record.at = monotonic_now();
        fault.record.took_effect = control_.run({"admin-delete", admin_kind(uri_), settings_.key});
        // Deleting a lock's keys one by one (etcd) takes a while, and a lease granted meanwhile
        // can lose its key too: the delete is over when the program returns.
        fault.record.done_at = monotonic_now();
        fault.record.inspected_at = monotonic_now();
        std::tie(fault.record.holder_after, fault.record.token_after) = holder_now();
        if (!fault.record.took_effect) fault.record.note = "the control program's delete failed";
        fault.heal_at += settings_.ttl;
        break;
      }
      case Fault::kLatency: {
        for (auto& p : proxies_) p->set_fault(NetworkFault::kLatency, milliseconds(100));
        fault.heal_at += settings_.ttl;
        break;
      }
      case Fault::kDrop: {
        for (auto& p : proxies_) p->set_fault(NetworkFault::kDrop);
        fault.heal_at += milliseconds(300);
        break;
      }
      case Fault::kCancelRace: {
        // Waits that time out or are cancelled about when a holder releases (worker.h); a grant
        // that races them must leave nothing held (RunRecord::left_held).
        for (auto& w : workers_) w->signal(SIGUSR1);
        fault.racing = true;
        fault.heal_at += settings_.ttl * 2;
        break;
      }
      case Fault::kEvict: {
        // Memory pressure on every server (PROGRAM fill PORT): a server with an evicting policy
        // evicts keys, fencelock's among them if its policy allows it.
        // Evidence (checker): INFO before and after the fill shows keys evicted, or a server
        // that the fill took from within its maxmemory to above it.
        std::vector<std::optional<RedisMemory>> before;
        for (const HostPort& server : servers_) before.push_back(memory_of(server, fault.record));
        fault.record.took_effect = true;
        for (const HostPort& server : servers_) {
          fault.record.took_effect &= control_.run({"fill", std::to_string(server.port)});
        }
        if (!fault.record.took_effect) fault.record.note = "the control program's fill failed";
        for (std::size_t i = 0; i < servers_.size(); ++i) {
          const std::optional<RedisMemory> after = memory_of(servers_[i], fault.record);
          if (!after || !before[i]) continue;
          fault.record.filled_up |= after->maxmemory > 0 &&
                                    before[i]->used_memory <= before[i]->maxmemory &&
                                    after->used_memory > after->maxmemory;
          fault.record.evicted_before =
              std::max<std::int64_t>(fault.record.evicted_before, 0) + before[i]->evicted_keys;
          fault.record.evicted_after =
              std::max<std::int64_t>(fault.record.evicted_after, 0) + after->evicted_keys;
        }
        fault.heal_at += settings_.ttl;
        break;
      }
      case Fault::kDelayOne: {
        // One chunk on one connection to one server held for 1.5 TTL, in turn a request (a
        // release, a renewal) and a reply: it arrives after later commands of other clients.
        const std::size_t n = record.faults.size();
        proxies_[n % proxies_.size()]->set_fault(
            n % 2 == 0 ? NetworkFault::kDelayOneRequest : NetworkFault::kDelayOneReply,
            settings_.ttl * 3 / 2);
        fault.heal_at += settings_.ttl * 2;
        break;
      }
      case Fault::kPartition: {
        // A minority: (n - 1) / 2 of n servers, or the only one.
        const std::size_t cut = proxies_.size() == 1 ? 1 : (proxies_.size() - 1) / 2;
        for (std::size_t i = 0; i < cut; ++i)
          proxies_[(record.faults.size() + i) % proxies_.size()]->set_fault(
              NetworkFault::kBlackhole);
        fault.heal_at += settings_.ttl * 3 / 2;
        break;
      }
      case Fault::kManyLeases:  // a condition of the run, never scheduled
        break;
    }
    return fault;
  }

  void heal(ActiveFault& fault, RunRecord& record) {
    if (fault.racing) {
      for (auto& w : workers_) w->signal(SIGUSR2);
    }
    if (fault.skewed_worker) {
      auto& w = workers_[static_cast<std::size_t>(*fault.skewed_worker)];
      w->kill_and_reap();
      w->start();
    }
    if (fault.jumped_worker) (void)cli::replace_file(clock_file(*fault.jumped_worker), "+0\n");
    if (fault.resume_server) {
      if (control_.run({"resume", std::to_string(fault.resume_server->port)})) {
        fault.record.probe_after =
            probe_until(*fault.resume_server, protocol_, ProbeResult::kAnswered, probe_deadline(),
                        answer_limit());
      } else {
        fault.record.took_effect = false;
        fault.record.note = "the control program's resume failed";
      }
    }
    if (fault.restart_server) {
      if (control_.run({"start"})) {
        fault.record.probe_after =
            probe_until(*fault.restart_server, protocol_, ProbeResult::kAnswered, probe_deadline(),
                        answer_limit());
      } else {
        fault.record.took_effect = false;
        fault.record.note += fault.record.note.empty() ? "the control program's start failed"
                                                       : "; its start failed too";
      }
    }
    if (fault.paused_worker) {
      // Resume the stale holder while a newer one is between its read and its write (bounded).
      for (auto until = Clock::now() + settings_.ttl;
           Clock::now() < until && !reg_->worker_between_read_and_write(*fault.paused_worker);)
        std::this_thread::sleep_for(milliseconds(1));
      workers_[static_cast<std::size_t>(*fault.paused_worker)]->signal(SIGCONT);
      record.pauses.push_back({*fault.paused_worker, fault.record.at, monotonic_now()});
    }
    for (auto& p : proxies_) p->set_fault(NetworkFault::kNone);
    if (find_fault(fault.record.kind)->through_proxy) {
      const std::uint64_t acted = proxy_actions() - fault.proxy_actions_before;
      fault.record.took_effect = acted > 0;
      if (acted == 0) fault.record.note = "no connection was delayed, reset or frozen";
    }
    fault.record.healed_at = monotonic_now();
    record.faults.push_back(fault.record);
  }

  // The register's log and the faults as JSON lines in the run's directory, for diagnosis.
  void write_history(const RunRecord& record) const {
    static constexpr const char* kKinds[] = {"hello", "acquire", "grant", "enter",
                                             "write", "exit",    "leave", "tick"};
    std::ostringstream out;
    for (const RegisterEvent& e : record.register_events) {
      out << nlohmann::json{{"t", kKinds[e.kind]},
                            {"worker", e.worker},
                            {"pid", e.pid},
                            {"token", e.token},
                            {"accepted", e.accepted},
                            {"value", e.value},
                            {"at", e.at},
                            {"wall", e.wall},
                            {"worker_steady", e.worker_steady},
                            {"worker_wall", e.worker_wall}}
                 .dump()
          << "\n";
    }
    for (const InjectedFault& f : record.faults) {
      out << nlohmann::json{{"t", "fault"},
                            {"kind", f.kind},
                            {"at", f.at},
                            {"healed_at", f.healed_at},
                            {"worker", f.worker},
                            {"pid", f.pid},
                            {"took_effect", f.took_effect},
                            {"done_at", f.done_at},
                            {"note", f.note},
                            {"probe_during", probe_result_name(f.probe_during)},
                            {"probe_after", probe_result_name(f.probe_after)},
                            {"evicted_before", f.evicted_before},
                            {"evicted_after", f.evicted_after},
                            {"filled_up", f.filled_up},
                            {"holder_before", f.holder_before},
                            {"token_before", f.token_before},
                            {"holder_after", f.holder_after},
                            {"token_after", f.token_after},
                            {"inspected_at", f.inspected_at}}
                 .dump()
          << "\n";
    }
    // Never through a symlink planted in --work-dir (private_files.h); diagnosis only, so a
    // failure is not an error of the run.
    (void)cli::replace_file(dir_ + "/history.jsonl", out.str());
  }

  void read_worker_logs(RunRecord& record) const {
    for (int id = 0; id < settings_.workers; ++id) {
      std::ifstream in(log_of(id));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) continue;  // a killed worker's half line
        if (j.value("t", "") != "lease") continue;
        LeaseReport r;
        r.worker = j.value("worker", 0);
        r.pid = j.value("pid", 0L);
        r.token = j.value("token", std::uint64_t{0});
        r.granted_at = j.value("granted_at", Nanos{0});
        r.valid_until = j.value("valid_until", Nanos{0});
        r.lost = j.value("lost", false);
        r.callback_ran = j.value("callback_ran", true);
        r.fired_at = j.value("fired_at", Nanos{0});
        r.observed_at = j.value("observed_at", Nanos{0});
        record.leases.push_back(r);
      }
    }
  }

  RunSettings settings_;
  std::string dir_;
  std::string uri_;                          // the backend as given (no proxies)
  std::vector<const FaultSpec*> scheduled_;  // the fault kinds injected in turn
  bool extras_ready_ = false;                // many-leases: every worker holds its extra leases
  std::string worker_uri_;
  std::unique_ptr<SharedRegister> reg_;
  std::string faketime_;  // libfaketime's path when clock faults are asked for
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  std::vector<HostPort> servers_;  // for the control program's faults: the servers of the URI
  ProbeProtocol protocol_ = ProbeProtocol::kRedis;  // how to probe them
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  ControlProgram control_;
  std::optional<Client> inspector_;  // admin-delete: looks at the lock around each delete
};

}  // namespace

bool known_fault(const std::string& kind) { return find_fault(kind) != nullptr; }

RunRecord run_torture(const RunSettings& settings, const std::string& uri, const std::string& dir,
                      const std::function<void(const RunRecord&, double)>& progress,
                      std::stop_token stop) {
  Orchestrator orchestrator(settings, uri, dir);
  return orchestrator.run(progress, stop);
}

}  // namespace fencelock::torture

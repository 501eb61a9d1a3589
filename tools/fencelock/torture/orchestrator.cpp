#include "torture/orchestrator.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "torture/endpoints.h"
#include "torture/fault_proxy.h"
#include "torture/shared_register.h"

extern char** environ;

namespace fencelock::torture {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

bool needs_proxy(const std::vector<std::string>& faults) {
  for (const auto& f : faults)
    if (f == "latency" || f == "drop" || f == "partition") return true;
  return false;
}

// One worker process, started by re-executing this program.
class WorkerProcess {
 public:
  // The backend URI travels in the environment (FENCELOCK_BACKEND), not in the argument list
  // that every user of the machine can read.
  WorkerProcess(int id, std::vector<std::string> argv, const std::string& backend,
                std::vector<std::string> env)
      : id_(id), argv_(std::move(argv)) {
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("FENCELOCK_BACKEND=")) env_.emplace_back(*e);
    }
    env_.push_back("FENCELOCK_BACKEND=" + backend);
    env_.insert(env_.end(), env.begin(), env.end());
    start();
  }
  ~WorkerProcess() { kill_and_reap(); }

  // `extra_env` is added for this start only (a skewed clock); "NAME=" removes NAME.
  void start(const std::vector<std::string>& extra_env = {}) {
    std::vector<char*> raw, env;
    std::vector<std::string> extra = extra_env;
    for (auto& a : argv_) raw.push_back(a.data());
    raw.push_back(nullptr);
    for (auto& e : env_) {
      const std::string_view name = std::string_view(e).substr(0, e.find('=') + 1);
      bool replaced = false;
      for (auto& x : extra) replaced |= std::string_view(x).starts_with(name);
      if (!replaced) env.push_back(e.data());
    }
    for (auto& e : extra) {
      if (e.back() != '=') env.push_back(e.data());  // "NAME=" only removes NAME
    }
    env.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve("/proc/self/exe", raw.data(), env.data());
      ::_exit(127);
    }
  }
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits up to `limit` for the process to exit; true when it did.
  bool wait_for(milliseconds limit) {
    for (auto until = Clock::now() + limit; pid_ > 0; std::this_thread::sleep_for(milliseconds(20))) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      if (Clock::now() >= until) return false;
    }
    return true;
  }
  void kill_and_reap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int id() const { return id_; }

 private:
  int id_;
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
};

struct ActiveFault {
  std::string kind;
  Nanos at = 0;
  Clock::time_point heal_at;
  std::optional<int> paused_worker;
  std::optional<int> skewed_worker;
  std::optional<int> jumped_worker;
  bool restart_servers = false;
};

class Orchestrator {
 public:
  Orchestrator(RunSettings settings, std::string uri, std::string dir)
      : settings_(std::move(settings)), dir_(std::move(dir)) {
    reg_ = std::make_unique<SharedRegister>(dir_ + "/register.sock", settings_.fenced);
    if (std::count(settings_.faults.begin(), settings_.faults.end(), "skew") +
            std::count(settings_.faults.begin(), settings_.faults.end(), "jump") >
        0) {
      faketime_ = kFaketime;
      if (!std::filesystem::exists(faketime_)) {
        throw std::invalid_argument(fmt::format(
            "clock faults (skew, jump) need libfaketime at {}: apt-get install faketime",
            faketime_));
      }
    }
    worker_uri_ = uri;
    if (std::count(settings_.faults.begin(), settings_.faults.end(), "server-kill") > 0) {
      if (settings_.server_control.empty()) {
        throw std::invalid_argument(
            "the fault server-kill needs --server-control PROGRAM (e.g. scripts/servers.sh for "
            "its local servers)");
      }
      auto split = split_uri(uri);
      if (!split.ok()) throw std::invalid_argument(split.status().message());
      servers_ = split->hosts;
    }
    if (needs_proxy(settings_.faults)) {
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
      if (!active && !settings_.faults.empty() && now >= next_fault &&
          now + settings_.ttl * 2 < end) {
        active = inject(settings_.faults[fault_index++ % settings_.faults.size()], record);
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
    record.final_value = reg_->value();
    read_worker_logs(record);
    return record;
  }

 private:
  // Runs `server_control ARGS` (output to the run's directory); a failure is noted there.
  void run_control(const std::string& args) const {
    const std::string command = fmt::format("'{}' {} >>'{}/server-control.log' 2>&1",
                                            settings_.server_control, args, dir_);
    (void)std::system(command.c_str());
  }

  std::string log_of(int id) const { return fmt::format("{}/worker-{}.log", dir_, id); }
  std::string clock_file(int id) const { return fmt::format("{}/clock-{}", dir_, id); }

  // With clock faults every worker runs under libfaketime, reading its wall-clock offset from
  // its clock file (re-read every second); the monotonic clock stays real.
  std::vector<std::string> clock_env(int id) const {
    if (faketime_.empty()) return {};
    std::ofstream(clock_file(id)) << "+0\n";
    return {"LD_PRELOAD=" + faketime_, "FAKETIME_TIMESTAMP_FILE=" + clock_file(id),
            "FAKETIME_CACHE_DURATION=1", "FAKETIME_DONT_FAKE_MONOTONIC=1",
            "DONT_FAKE_MONOTONIC=1"};
  }

  std::vector<std::string> worker_argv(int id) const {
    return {"fencelock",
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
            std::to_string(settings_.critical.count())};
  }

  ActiveFault inject(const std::string& kind, RunRecord& record) {
    ActiveFault fault{kind, monotonic_now(), Clock::now(), std::nullopt};
    const auto pick = [&] {
      return reg_->worker_inside().value_or(static_cast<int>(record.faults.size()) %
                                            settings_.workers);
    };
    if (kind == "pause") {
      // Wait (a little) for a holder between its read and its write: the GC pause that hurts.
      for (int i = 0; i < 500 && !reg_->worker_between_read_and_write(); ++i)
        std::this_thread::sleep_for(milliseconds(2));
      fault.paused_worker = pick();
      workers_[static_cast<std::size_t>(*fault.paused_worker)]->signal(SIGSTOP);
      fault.heal_at += settings_.ttl * 3 / 2;
    } else if (kind == "kill") {
      auto& w = workers_[static_cast<std::size_t>(pick())];
      w->kill_and_reap();
      w->start();
    } else if (kind == "skew") {
      // Restarted with a clock (monotonic and wall) running at a quarter of the real rate: its
      // renewals come too late and its own idea of validity is 4x too long, so its first (long)
      // critical section outlives its lease. Healed by a restart with the real clock.
      fault.skewed_worker = pick();
      auto& w = workers_[static_cast<std::size_t>(*fault.skewed_worker)];
      w->kill_and_reap();
      w->start({"LD_PRELOAD=" + faketime_, "FAKETIME=+0 x0.25", "FAKETIME_DONT_FAKE_MONOTONIC=0",
                "DONT_FAKE_MONOTONIC=0", "FAKETIME_TIMESTAMP_FILE="});
      fault.heal_at += settings_.ttl * 5;
    } else if (kind == "jump") {
      // The wall clock of one worker steps back 30 s (as an NTP step would); CLOCK_MONOTONIC
      // does not move. fencelock must not care (Redis FIFO tickets use the wall clock: fairness
      // may suffer, never safety).
      fault.jumped_worker = pick();
      std::ofstream(clock_file(*fault.jumped_worker)) << "-30s\n";
      fault.heal_at += settings_.ttl * 2;
    } else if (kind == "server-kill") {
      // One server at a time (a minority of a cluster), crashed and restarted one TTL later.
      const HostPort& victim = servers_[record.faults.size() % servers_.size()];
      run_control(fmt::format("kill {}", victim.port));
      fault.restart_servers = true;
      fault.heal_at += settings_.ttl;
    } else if (kind == "latency") {
      for (auto& p : proxies_) p->set_fault(NetworkFault::kLatency, milliseconds(100));
      fault.heal_at += settings_.ttl;
    } else if (kind == "drop") {
      for (auto& p : proxies_) p->set_fault(NetworkFault::kDrop);
      fault.heal_at += milliseconds(300);
    } else if (kind == "partition") {
      // A minority: (n - 1) / 2 of n servers, or the only one.
      const std::size_t cut = proxies_.size() == 1 ? 1 : (proxies_.size() - 1) / 2;
      for (std::size_t i = 0; i < cut; ++i)
        proxies_[(record.faults.size() + i) % proxies_.size()]->set_fault(NetworkFault::kBlackhole);
      fault.heal_at += settings_.ttl * 3 / 2;
    }
    return fault;
  }

  void heal(const ActiveFault& fault, RunRecord& record) {
    if (fault.skewed_worker) {
      auto& w = workers_[static_cast<std::size_t>(*fault.skewed_worker)];
      w->kill_and_reap();
      w->start();
    }
    if (fault.jumped_worker) std::ofstream(clock_file(*fault.jumped_worker)) << "+0\n";
    if (fault.restart_servers) run_control("start");
    if (fault.paused_worker) {
      workers_[static_cast<std::size_t>(*fault.paused_worker)]->signal(SIGCONT);
      record.pauses.push_back({*fault.paused_worker, fault.at, monotonic_now()});
    }
    for (auto& p : proxies_) p->set_fault(NetworkFault::kNone);
    record.faults.push_back({fault.kind, fault.at, monotonic_now()});
  }

  void read_worker_logs(RunRecord& record) const {
    for (int id = 0; id < settings_.workers; ++id) {
      std::ifstream in(log_of(id));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) continue;  // a killed worker's half line
        const std::string t = j.value("t", "");
        if (t == "grant") {
          record.grant_log.push_back({j.value("worker", 0), j.value("token", std::uint64_t{0}),
                                      j.value("at", Nanos{0})});
        }
        if (t == "lost") {
          record.lost.push_back({j.value("worker", 0), j.value("token", std::uint64_t{0}),
                                 j.value("granted_at", Nanos{0}), j.value("at", Nanos{0}),
                                 j.value("valid_until", Nanos{0})});
        }
      }
    }
  }

  RunSettings settings_;
  std::string dir_;
  std::string worker_uri_;
  std::unique_ptr<SharedRegister> reg_;
  std::string faketime_;  // libfaketime's path when clock faults are asked for
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  std::vector<HostPort> servers_;  // for server-kill: the servers of the URI
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

}  // namespace

bool known_fault(const std::string& kind) {
  for (const char* k :
       {"pause", "kill", "latency", "drop", "partition", "skew", "jump", "server-kill"})
    if (kind == k) return true;
  return false;
}

RunRecord run_torture(const RunSettings& settings, const std::string& uri, const std::string& dir,
                      const std::function<void(const RunRecord&, double)>& progress,
                      std::stop_token stop) {
  Orchestrator orchestrator(settings, uri, dir);
  return orchestrator.run(progress, stop);
}

}  // namespace fencelock::torture

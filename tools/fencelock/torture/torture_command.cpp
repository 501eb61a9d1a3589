#include "torture/torture_command.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "core/duration.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "reporter.h"
#include "torture/checker.h"
#include "torture/endpoints.h"
#include "torture/fault_proxy.h"
#include "torture/shared_register.h"

extern char** environ;

namespace fencelock::cli {

namespace {

using namespace torture;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kExitViolation = 1;
constexpr const char* kFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }


struct Settings {
  milliseconds duration, ttl, critical;
  std::vector<std::string> faults;
};

Result<Settings> parse(const TortureArgs& args) {
  Settings s{};
  for (auto [name, text, out] : {std::tuple{"--duration", &args.duration, &s.duration},
                                 std::tuple{"--ttl", &args.ttl, &s.ttl},
                                 std::tuple{"--critical", &args.critical, &s.critical}}) {
    auto d = parse_duration_option(name, *text);
    if (!d.ok()) return d.status();
    *out = *d;
  }
  if (s.ttl.count() <= 0 || s.duration.count() <= 0)
    return Status(Code::kInvalidArgument, "--ttl and --duration must be greater than 0");
  if (args.workers < 1 || args.workers > 64)
    return Status(Code::kInvalidArgument, "--workers must be between 1 and 64");
  for (std::size_t at = 0; at <= args.faults.size();) {
    std::size_t comma = std::min(args.faults.find(',', at), args.faults.size());
    std::string fault = args.faults.substr(at, comma - at);
    at = comma + 1;
    if (fault.empty() || fault == "none") continue;
    if (fault != "pause" && fault != "kill" && fault != "latency" && fault != "drop" &&
        fault != "partition" && fault != "skew" && fault != "jump") {
      return Status(Code::kInvalidArgument,
                    fmt::format("unknown fault '{}' (pause, kill, latency, drop, partition, skew, "
                                "jump)",
                                fault));
    }
    s.faults.push_back(fault);
  }
  return s;
}

bool needs_proxy(const Settings& s) {
  for (const auto& f : s.faults)
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
};

class Orchestrator {
 public:
  Orchestrator(const TortureArgs& args, Settings settings, std::string uri, std::string dir)
      : args_(args), settings_(std::move(settings)), dir_(std::move(dir)) {
    reg_ = std::make_unique<SharedRegister>(dir_ + "/register.sock", !args.unsafe_no_fence);
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
    if (needs_proxy(settings_)) {
      auto split = split_uri(uri);
      if (!split.ok()) throw std::invalid_argument(split.status().message());
      for (auto& host : split->hosts) {
        proxies_.push_back(std::make_unique<FaultProxy>(host.host, host.port));
        host = HostPort{"127.0.0.1", proxies_.back()->port()};
      }
      worker_uri_ = join_uri(*split);
    }
  }

  RunRecord run(const std::function<void(const RunRecord&, double)>& progress) {
    RunRecord record;
    record.started_at = monotonic_now();
    for (int id = 0; id < args_.workers; ++id)
      workers_.push_back(
          std::make_unique<WorkerProcess>(id, worker_argv(id), worker_uri_, clock_env(id)));
    const auto start = Clock::now(), end = start + settings_.duration;
    const milliseconds interval = std::max(settings_.ttl, milliseconds(500));
    auto next_fault = start + interval;
    auto next_progress = start + milliseconds(1000);
    std::size_t fault_index = 0;
    std::optional<ActiveFault> active;
    while (Clock::now() < end && !g_interrupted) {
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

  const std::string& worker_uri() const { return worker_uri_; }

 private:
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
                                            args_.workers);
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
    if (fault.paused_worker) {
      workers_[static_cast<std::size_t>(*fault.paused_worker)]->signal(SIGCONT);
      record.pauses.push_back({*fault.paused_worker, fault.at, monotonic_now()});
    }
    for (auto& p : proxies_) p->set_fault(NetworkFault::kNone);
    record.faults.push_back({fault.kind, fault.at, monotonic_now()});
  }

  void read_worker_logs(RunRecord& record) const {
    for (int id = 0; id < args_.workers; ++id) {
      std::ifstream in(log_of(id));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) continue;  // a killed worker's half line
        const std::string t = j.value("t", "");
        if (t == "grant") record.grants++;
        if (t == "lost") {
          record.lost.push_back({j.value("worker", 0), j.value("token", std::uint64_t{0}),
                                 j.value("granted_at", Nanos{0}), j.value("at", Nanos{0}),
                                 j.value("valid_until", Nanos{0})});
        }
      }
    }
  }

  const TortureArgs& args_;
  Settings settings_;
  std::string dir_;
  std::string worker_uri_;
  std::unique_ptr<SharedRegister> reg_;
  std::string faketime_;  // libfaketime's path when clock faults are asked for
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

double ms(Nanos n) { return static_cast<double>(n) / 1e6; }

nlohmann::json report_json(const Report& r, const TortureArgs& args, const std::string& backend) {
  nlohmann::json by_fault = nlohmann::json::object();
  for (const auto& [kind, stats] : r.by_fault) {
    by_fault[kind] = {{"count", stats.count},
                      {"max_unavailable_after_heal_ms", ms(stats.max_unavailable)}};
  }
  return {{"backend", backend},
          {"workers", args.workers},
          {"faults", args.faults},
          {"fenced", !args.unsafe_no_fence},
          {"operations", r.operations},
          {"grants", r.grants},
          {"writes_applied", r.writes_applied},
          {"stale_rejected", r.writes_rejected},
          {"faults_injected", r.faults},
          {"fenced_violations", r.fenced_violations},
          {"lost_updates", r.lost_updates},
          {"late_lost", r.late_lost},
          {"lost_signals", r.lost_signals},
          {"overlaps", r.overlaps},
          {"max_lost_delay_ms", ms(r.max_lost_delay)},
          {"max_unavailable_after_heal_ms", ms(r.max_unavailable)},
          {"by_fault", by_fault},
          {"safe", r.safe()}};
}

void print_report(const Report& r) {
  auto row = [](const char* name, std::uint64_t value, const char* note) {
    std::fputs(fmt::format("  {:<22} {:>8}  {}\n", name, value, note).c_str(), stdout);
  };
  row("operations", r.operations, "register reads, writes, exits");
  row("grants", r.grants, "");
  row("writes applied", r.writes_applied, "");
  row("stale rejected", r.writes_rejected, "reads and writes the fence refused");
  row("faults injected", r.faults, "");
  row("fenced violations", r.fenced_violations, "must be 0");
  row("lost updates", r.lost_updates, "must be 0");
  row("late lost()", r.late_lost, "must be 0 (unpaused workers)");
  row("lost() signals", r.lost_signals, "");
  row("overlaps", r.overlaps, "raw mutual exclusion; absorbed by the fence");
  std::fputs(fmt::format("  {:<22} {:>8.0f}  ms, longest, fault healed -> next critical section\n",
                         "unavailable after heal", ms(r.max_unavailable))
                 .c_str(),
             stdout);
  for (const auto& [kind, stats] : r.by_fault) {
    std::fputs(fmt::format("    {:<20} {:>8}  injected; unavailable after heal at most {:.0f} ms\n",
                           kind, stats.count, ms(stats.max_unavailable))
                   .c_str(),
               stdout);
  }
  std::fputs(r.safe() ? "result: SAFE\n" : "result: UNSAFE\n", stdout);
  std::fflush(stdout);
}

}  // namespace

int torture_command(const TortureArgs& args) {
  Reporter reporter(args.json);
  auto settings = parse(args);
  if (!settings.ok()) {
    return reporter.fail(kExitUsage, "usage",
                         settings.status().message() + "; see 'fencelock torture --help'");
  }
  BackendChoice backend = choose_backend(args.backend);
  std::string dir = args.work_dir;
  if (!dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return reporter.fail(kExitUsage, "usage",
                           fmt::format("--work-dir {}: {}", dir, error.message()));
    }
  } else {
    char templ[] = "/tmp/fencelock-torture-XXXXXX";
    if (::mkdtemp(templ) == nullptr)
      return reporter.fail(kExitSoftware, "internal", "cannot create a directory under /tmp");
    dir = templ;
  }
  std::string described;
  {  // The backend must answer before workers start (a clear error instead of silent workers).
    auto probe = Client::connect(backend.uri);
    if (!probe.ok()) {
      return reporter.fail(exit_code_for(probe.code()), std::string(code_name(probe.code())),
                           explain_connect_failure(probe.status(), backend));
    }
    described = probe->describe();
  }
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  std::optional<Orchestrator> orchestrator;
  try {
    orchestrator.emplace(args, *settings, backend.uri, dir);
  } catch (const std::exception& e) {
    return reporter.fail(kExitUsage, "usage", e.what());
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  if (!args.json) {
    std::fputs(fmt::format("fencelock torture: {}, {} workers, {}, TTL {}, faults {}{}; logs in {}\n",
                           described, args.workers, detail::format_duration(settings->duration),
                           detail::format_duration(settings->ttl),
                           settings->faults.empty() ? "none" : args.faults,
                           args.unsafe_no_fence ? " (UNSAFE: fence disabled)" : "", dir)
                   .c_str(),
               stdout);
    std::fflush(stdout);
  }
  RunRecord record = orchestrator->run([&](const RunRecord& r, double done) {
    if (args.json) return;
    std::string line = fmt::format("torture: {:3.0f}%  faults {}  ", 100 * done, r.faults.size());
    if (tty) {
      std::fputs(("\r" + line).c_str(), stderr);
    } else if (static_cast<int>(done * 100) % 10 == 0) {
      std::fputs((line + "\n").c_str(), stderr);
    }
  });
  if (tty && !args.json) std::fputs("\n", stderr);
  const Report report = check(record, std::chrono::milliseconds(25));
  if (args.json) {
    std::fputs((json_line(report_json(report, args, described)) + "\n").c_str(), stdout);
  } else {
    print_report(report);
  }
  if (g_interrupted) return kExitSignalBase + SIGINT;
  return report.safe() ? kExitOk : kExitViolation;
}

int torture_worker_command(const torture::WorkerArgs& args) { return torture::run_worker(args); }

}  // namespace fencelock::cli

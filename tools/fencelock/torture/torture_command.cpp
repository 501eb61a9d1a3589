#include "torture/torture_command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "connect_warnings.h"
#include "core/duration.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "private_files.h"
#include "progress.h"
#include "reporter.h"
#include "torture/checker.h"
#include "torture/faults.h"
#include "torture/orchestrator.h"

namespace fencelock::cli {

namespace {

using namespace torture;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

Result<RunSettings> parse(const TortureArgs& args) {
  RunSettings s;
  s.workers = args.workers;
  s.fence = args.unsafe_no_fence || args.fence == "none" ? FenceMode::kNone
            : args.fence == "write-only"                 ? FenceMode::kWriteOnly
                                                         : FenceMode::kFull;
  s.server_control = args.server_control;
  if (args.extra_leases < 1 || args.extra_leases > 100'000)
    return Status(Code::kInvalidArgument, "--extra-leases must be between 1 and 100000");
  s.extra_leases = args.extra_leases;
  s.async_api = args.api == "async";
  auto key = LockKey::make(args.key);
  if (!key.ok()) return Status(Code::kInvalidArgument, "--key: " + key.status().message());
  s.key = args.key;
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
    if (!known_fault(fault)) {
      return Status(Code::kInvalidArgument,
                    fmt::format("unknown fault '{}' ({})", fault, fault_names()));
    }
    s.faults.push_back(fault);
  }
  return s;
}

double ms(Nanos n) { return static_cast<double>(n) / 1e6; }

const char* fence_name(FenceMode mode) {
  switch (mode) {
    case FenceMode::kFull:
      return "full";
    case FenceMode::kWriteOnly:
      return "write-only";
    case FenceMode::kNone:
      return "none";
  }
  return "full";
}

nlohmann::json report_json(const Report& r, const TortureArgs& args, const RunSettings& s,
                           const std::string& backend) {
  nlohmann::json by_fault = nlohmann::json::object();
  for (const auto& [kind, stats] : r.by_fault) {
    by_fault[kind] = {{"count", stats.count},
                      {"effective", stats.effective},
                      {"max_unavailable_after_heal_ms", ms(stats.max_unavailable)}};
  }
  return {{"backend", backend},
          {"workers", args.workers},
          {"faults", args.faults},
          {"key", s.key},
          {"fence", fence_name(s.fence)},
          {"api", s.async_api ? "async" : "blocking"},
          {"fenced", s.fence != FenceMode::kNone},
          {"operations", r.operations},
          {"grants", r.grants},
          {"writes_applied", r.writes_applied},
          {"stale_rejected", r.writes_rejected},
          {"faults_injected", r.faults},
          {"fenced_violations", r.fenced_violations},
          {"lost_updates", r.lost_updates},
          {"token_violations", r.token_violations},
          {"exclusion_violations", r.exclusion_violations},
          {"late_lost", r.late_lost},
          {"unsignalled_expiries", r.unsignalled_expiries},
          {"deletions_unnoticed", r.deletions_unnoticed},
          {"left_held", r.left_held},
          {"lost_signals", r.lost_signals},
          {"overlaps", r.overlaps},
          {"overlaps_after_expiry", r.overlaps_after_expiry},
          {"overlaps_excused", r.overlaps_excused},
          {"max_lost_delay_ms", ms(r.max_lost_delay)},
          {"max_unavailable_after_heal_ms", ms(r.max_unavailable)},
          {"by_fault", by_fault},
          {"violations", r.violations},
          {"inconclusive", r.inconclusive},
          {"verdict", verdict_name(r.verdict())},
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
  row("token violations", r.token_violations, "must be 0 (regressions, repeats)");
  row("exclusion violations", r.exclusion_violations,
      "must be 0 (entered while another was valid)");
  row("late lost()", r.late_lost, "must be 0 (unpaused workers)");
  row("unsignalled expiries", r.unsignalled_expiries, "must be 0 (validity passed, no lost())");
  row("deletions unnoticed", r.deletions_unnoticed, "must be 0 (admin-delete, lost() too late)");
  row("left held", r.left_held, "must be 0 (the lock held by nobody after the run)");
  row("lost() signals", r.lost_signals, "");
  row("overlaps", r.overlaps, "raw mutual exclusion; after expiry: absorbed by the fence");
  row("  after expiry", r.overlaps_after_expiry, "");
  row("  excused", r.overlaps_excused,
      "skewed clock, no validity promised, or an admin-delete the holder learned of in time");
  std::fputs(fmt::format("  {:<22} {:>8.0f}  ms, longest, fault healed -> next critical section\n",
                         "unavailable after heal", ms(r.max_unavailable))
                 .c_str(),
             stdout);
  for (const auto& [kind, stats] : r.by_fault) {
    std::fputs(fmt::format("    {:<20} {:>8}  injected, {} took effect; unavailable after heal "
                           "at most {:.0f} ms\n",
                           kind, stats.count, stats.effective, ms(stats.max_unavailable))
                   .c_str(),
               stdout);
  }
  for (const std::string& v : r.violations)
    std::fputs(("  violation: " + v + "\n").c_str(), stdout);
  for (const std::string& why : r.inconclusive)
    std::fputs(("  inconclusive: " + why + "\n").c_str(), stdout);
  std::fputs(fmt::format("result: {}\n", verdict_name(r.verdict())).c_str(), stdout);
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
  BackendChoice backend = choose_backend(args.backend, args.json);
  std::string dir = args.work_dir;
  if (!dir.empty()) {
    // Created one component at a time, through no directory or link another user controls, and
    // writable by this user only: its files are never written through a planted name
    // (private_files.h).
    if (std::string why = cli::make_trusted_directory(dir); !why.empty())
      return reporter.fail(kExitUsage, "usage", fmt::format("--work-dir {}: {}", dir, why));
  } else {
    char templ[] = "/tmp/fencelock-torture-XXXXXX";
    if (::mkdtemp(templ) == nullptr)
      return reporter.fail(kExitSoftware, "internal", "cannot create a directory under /tmp");
    dir = templ;
  }
  std::string described;
  {  // The backend must answer before workers start (a clear error instead of silent workers).
    auto probe = connect_with_warnings(backend.uri, args.json);
    if (!probe.ok()) {
      return reporter.fail(exit_code_for(probe.code()), std::string(code_name(probe.code())),
                           explain_connect_failure(probe.status(), backend));
    }
    described = probe->describe();
  }
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESTART;  // the flag is polled; blocking calls carry on
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  if (!args.json) {
    std::fputs(
        fmt::format("fencelock torture: {}, {} workers, {}, TTL {}, faults {}{}; logs in {}\n",
                    described, args.workers, detail::format_duration(settings->duration),
                    detail::format_duration(settings->ttl),
                    settings->faults.empty() ? "none" : args.faults,
                    settings->fence == FenceMode::kNone        ? " (UNSAFE: fence disabled)"
                    : settings->fence == FenceMode::kWriteOnly ? " (write-only fence)"
                                                               : "",
                    dir)
            .c_str(),
        stdout);
    std::fflush(stdout);
  }
  // Signals end the run early (the report covers what ran); the handler only sets a flag.
  std::stop_source stop;
  std::jthread relay([&](std::stop_token done) {
    while (!done.stop_requested() && !g_interrupted) std::this_thread::sleep_for(milliseconds(50));
    if (g_interrupted) stop.request_stop();
  });
  RunRecord record;
  Progress progress("torture", !args.json);
  try {
    record = run_torture(
        *settings, backend.uri, dir,
        [&](const RunRecord& r, double done) {
          const double seconds = done * std::chrono::duration<double>(settings->duration).count();
          progress.update(
              done,
              fmt::format("{:.0f} ops/s",
                          seconds > 0 ? static_cast<double>(r.operations_so_far) / seconds : 0),
              fmt::format("faults {}", r.faults.size()));
        },
        stop.get_token());
  } catch (const std::invalid_argument& e) {
    return reporter.fail(kExitUsage, "usage", e.what());
  } catch (const std::exception& e) {
    return reporter.fail(kExitSoftware, "internal", e.what());
  }
  relay.request_stop();
  progress.finish();
  CheckOptions check_options;
  check_options.ttl = settings->ttl;
  check_options.duration = settings->duration;
  check_options.fence = settings->fence;
  // PostgreSQL advisory locks (the default mode) promise no validity: the server frees a lock
  // the moment its session dies.
  check_options.validity_bound = described.find("mode=advisory") == std::string::npos;
  check_options.requested_faults = settings->faults;
  const Report report = check(record, check_options);
  if (args.json) {
    std::fputs((json_line(report_json(report, args, *settings, described)) + "\n").c_str(), stdout);
  } else {
    print_report(report);
  }
  if (g_interrupted) return kExitSignalBase + SIGINT;
  switch (report.verdict()) {
    case Verdict::kSafe:
      return kExitOk;
    case Verdict::kUnsafe:
      return kExitViolation;
    case Verdict::kInconclusive:
      return kExitInconclusive;
  }
  return kExitInconclusive;
}

int torture_worker_command(const torture::WorkerArgs& args) { return torture::run_worker(args); }

}  // namespace fencelock::cli

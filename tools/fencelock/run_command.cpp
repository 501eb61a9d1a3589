#include "run_command.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "acquisition.h"
#include "backend_choice.h"
#include "core/duration.h"
#include "core/errno_text.h"
#include "core/metrics.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "fencelock/client.h"
#include "fencelock/metrics.h"
#include "guardian.h"
#include "private_files.h"
#include "process_tree.h"
#include "reporter.h"
#include "signals.h"
#include "supervisor.h"
#include "unique_fd.h"

namespace fencelock::cli {
namespace {

using std::chrono::milliseconds;

struct RunSettings {
  LockKey key;
  AcquireOptions acquire;
  milliseconds kill_grace;
};

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string_view base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Shown by `fencelock status` and `list`. Only the program name of the command: its arguments may
// hold secrets.
std::string holder_metadata(const std::vector<std::string>& command) {
  nlohmann::json meta = {{"host", host_name()},
                         {"pid", static_cast<long>(getpid())},
                         {"program", "fencelock run"},
                         {"command", std::string(base_name(command.front()))}};
  // Metadata must be UTF-8 JSON (the library checks it): a program or host name that is not UTF-8
  // gets U+FFFD for its bad bytes here, not json_line()'s \udcXX escapes, which the check refuses.
  return meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The backends' passwords in the environment (README, docs/CLI.md): kept from CMD unless
// --pass-secrets.
constexpr std::string_view kSecretVariables[] = {
    "FENCELOCK_REDIS_PASSWORD=", "FENCELOCK_ETCD_PASSWORD=", "PGPASSWORD="};

// The inherited environment with our four variables set (an inherited FENCELOCK_BACKEND, which
// may hold a password, is replaced by the description without one) and, unless `pass_secrets`,
// without the backends' password variables.
std::vector<std::string> command_environment(const Lease& lease, const std::string& backend,
                                             bool pass_secrets) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view e(*entry);
    if (e.starts_with("FENCELOCK_KEY=") || e.starts_with("FENCELOCK_TOKEN=") ||
        e.starts_with("FENCELOCK_ISSUER=") || e.starts_with("FENCELOCK_BACKEND=")) {
      continue;
    }
    if (!pass_secrets && std::any_of(std::begin(kSecretVariables), std::end(kSecretVariables),
                                     [&](std::string_view v) { return e.starts_with(v); })) {
      continue;
    }
    env.emplace_back(e);
  }
  env.push_back("FENCELOCK_KEY=" + lease.key().str());
  env.push_back(fmt::format("FENCELOCK_TOKEN={}", lease.token().value()));
  env.push_back("FENCELOCK_ISSUER=" + lease.fencing().issuer);  // no password: fence.h
  env.push_back("FENCELOCK_BACKEND=" + backend);
  return env;
}

// Whether --metrics FILE can be written, checked before connecting (usage error if not): FILE
// must be a regular file or a new name in a writable directory (private_files.h). Only regular
// files are written, through a temporary file renamed over FILE, so that a reader such as
// node_exporter's textfile collector never sees half of it.
Status check_metrics_path(const std::string& path) {
  if (std::string why = check_replaceable(path); !why.empty()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("--metrics: cannot write '{}': {}", path, why));
  }
  return Status::Ok();
}

// Writes `text` to `path` (replace_file: never through a symlink, only a regular file). Returns
// an error message, "" on success.
std::string write_metrics_file(const std::string& path, std::string_view text) {
  return replace_file(path, text);
}

// The value of `sample` (its name and labels, as written) in the Prometheus text at `path`, if
// that file is one of this user's (read_own_file: never a file another user planted) and the
// value is a plain number (the last run's last success, kept across failures).
std::optional<std::string> previous_sample(const std::string& path, const std::string& sample) {
  const std::optional<std::string> text = read_own_file(path, 1 << 20);
  if (!text) return std::nullopt;
  const std::string prefix = sample + " ";
  for (std::size_t at = 0; at < text->size();) {
    const std::size_t end = std::min(text->find('\n', at), text->size());
    const std::string_view line(text->data() + at, end - at);
    if (line.starts_with(prefix)) {
      const std::string_view value = line.substr(prefix.size());
      const bool number = !value.empty() && value.size() <= 32 &&
                          value.find_first_not_of("0123456789.") == std::string_view::npos;
      return number ? std::optional<std::string>(value) : std::nullopt;
    }
    at = end + 1;
  }
  return std::nullopt;
}

// What a cron job's monitoring needs of this run, labelled with the key: how long `run` took
// (waiting for the lock included), the exit code it returned, and when a run of this key last
// exited 0 (carried over from the file when this one did not).
std::string run_metrics(const std::string& path, const std::string& key,
                        std::chrono::steady_clock::duration took, int exit_code) {
  const std::string labels = fmt::format("{{key=\"{}\"}}", detail::escape_label(key));
  const std::string success_sample = "fencelock_run_last_success_timestamp_seconds" + labels;
  std::optional<std::string> last_success;
  if (exit_code == 0) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    last_success = fmt::format("{:.3f}", std::chrono::duration<double>(now).count());
  } else {
    last_success = previous_sample(path, success_sample);
  }
  std::string out = fmt::format(
      "# HELP fencelock_run_duration_seconds How long fencelock run took, waiting for the lock "
      "included.\n"
      "# TYPE fencelock_run_duration_seconds gauge\n"
      "fencelock_run_duration_seconds{} {:.3f}\n"
      "# HELP fencelock_run_exit_code The exit code fencelock run returned.\n"
      "# TYPE fencelock_run_exit_code gauge\n"
      "fencelock_run_exit_code{} {}\n",
      labels, std::chrono::duration<double>(took).count(), labels, exit_code);
  if (last_success) {
    out += fmt::format(
        "# HELP fencelock_run_last_success_timestamp_seconds When a run of this key last exited "
        "0 (Unix time).\n"
        "# TYPE fencelock_run_last_success_timestamp_seconds gauge\n"
        "{} {}\n",
        success_sample, *last_success);
  }
  return out;
}

// Writes the client's metrics for --metrics, and the run's own (run_metrics). A failure is a
// warning: the exit code stays the command's (the lock is already released).
void write_metrics(const std::string& path, const std::string& run_text, const Client& client,
                   const Reporter& reporter) {
  std::string error =
      write_metrics_file(path, run_text + to_prometheus(client.metrics(), client.describe()));
  if (error.empty()) return;
  std::string message = fmt::format("warning: cannot write metrics to '{}': {}", path, error);
  if (reporter.json()) {
    std::fputs((json_line({{"warning", "metrics"}, {"message", message}}) + "\n").c_str(), stderr);
  } else {
    reporter.note(message);
  }
}

// Checks every argument before any connection is made, so usage errors never need a backend.
Result<RunSettings> parse_settings(const RunArgs& args) {
  auto key = LockKey::make(args.key);
  if (!key.ok()) {
    return Status(Code::kInvalidArgument, fmt::format("invalid KEY: {}", key.status().message()));
  }
  auto ttl = parse_duration_option("--ttl", args.ttl);
  if (!ttl.ok()) return ttl.status();
  if (ttl->count() <= 0) {
    return Status(Code::kInvalidArgument, "--ttl must be greater than 0 (e.g. --ttl 10s)");
  }
  auto wait = parse_duration_option("--wait", args.wait);
  if (!wait.ok()) return wait.status();
  auto grace = parse_duration_option("--kill-grace", args.kill_grace);
  if (!grace.ok()) return grace.status();
  if (args.command.empty() || args.command.front().empty()) {
    return Status(Code::kInvalidArgument,
                  "missing command: use fencelock run [OPTIONS] KEY -- CMD [ARGS...]");
  }
  if (!args.metrics_file.empty()) {
    if (Status st = check_metrics_path(args.metrics_file); !st.ok()) return st;
  }
  RunSettings settings{std::move(key).value(), AcquireOptions{}, *grace};
  settings.acquire.ttl = *ttl;
  settings.acquire.wait = *wait;
  settings.acquire.metadata = holder_metadata(args.command);
  return settings;
}

// The controlling terminal, if fencelock is in its foreground process group: the command's group
// gets the foreground while it runs. Invalid otherwise (no terminal, or fencelock in the
// background), and then the command's group never has the terminal's foreground.
UniqueFd foreground_terminal() {
  UniqueFd tty(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (tty.valid() && ::tcgetpgrp(tty.get()) != ::getpgrp()) tty.reset();
  return tty;
}

std::string not_acquired_message(const Status& status, milliseconds wait) {
  if (wait.count() == 0) {
    return status.to_string() +
           "; not acquired (pass --wait DUR to wait for it); the command was not run";
  }
  return fmt::format("{}; not acquired within {}; the command was not run", status.to_string(),
                     detail::format_duration(wait));
}

// Runs the command under `lease` until it exits; returns the exit code of fencelock run.
int supervise_under_lease(const RunArgs& args, const RunSettings& settings, Lease& lease,
                          const std::string& backend, SignalChannel& signals, Guardian& guardian,
                          const Reporter& reporter) {
  const std::string& key = settings.key.str();
  const std::string& program = args.command.front();
  nlohmann::json summary = {{"key", key}, {"token", lease.token().value()}, {"backend", backend}};

  // Shared with the on_lost callback, which may outlive this frame inside the lease state.
  auto lost_fd = std::make_shared<UniqueFd>(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!lost_fd->valid()) {
    Status released = lease.release();
    (void)released;
    return reporter.fail(kExitSoftware, "internal",
                         fmt::format("cannot open an eventfd: {}", detail::errno_text(errno)),
                         summary);
  }
  lease.on_lost([lost_fd] {
    std::uint64_t one = 1;
    ssize_t ignored = ::write(lost_fd->get(), &one, sizeof one);
    (void)ignored;
  });
  if (lease.is_lost()) {
    return reporter.fail(kExitLeaseLost, "lease_lost",
                         fmt::format("lease on '{}' was lost before {} could start; the command "
                                     "was not run",
                                     key, program),
                         summary);
  }

  const LeaseDeadline deadline{[&lease] { return lease.valid_until(); }, settings.acquire.ttl,
                               args.grace_outlives_lease};
  // The guardian knows the deadline before the command starts (the supervisor moves it on).
  const GuardianDeadlines initial =
      guardian_deadlines(lease.valid_until(), settings.kill_grace, deadline);
  guardian.set_deadlines(initial.term_at, initial.kill_at);

  const UniqueFd terminal = foreground_terminal();
  const std::vector<std::string> argv =
      args.pid_namespace ? pid_namespace::wrap(args.command) : args.command;
  Spawned child = spawn_command(argv, command_environment(lease, backend, args.pass_secrets),
                                signals.original_mask(), terminal.get(), guardian.arming_fd());
  if (child.pid < 0) {
    guardian.stand_down();  // it may have been armed by a child whose exec failed
    Status released = lease.release();
    (void)released;
    int code = child.exec_errno == ENOENT ? kExitNotFound : kExitCannotExecute;
    return reporter.fail(
        code, "exec",
        fmt::format("cannot run '{}': {}", program, detail::errno_text(child.exec_errno)), summary);
  }

  // The time SIGKILL follows SIGTERM, as the supervisor will apply it.
  auto kill_follows = [&] {
    if (args.grace_outlives_lease) return detail::format_duration(settings.kill_grace);
    const auto left =
        std::chrono::floor<milliseconds>(lease.valid_until() - std::chrono::steady_clock::now());
    return left < settings.kill_grace
               ? fmt::format("{} (when the lease's validity ends)",
                             detail::format_duration(std::max(left, milliseconds(0))))
               : detail::format_duration(settings.kill_grace);
  };
  SupervisionHooks hooks;
  hooks.on_lease_lost = [&] {
    reporter.note(fmt::format(
        "lease on '{}' lost (token {}): it could not be renewed and may already belong to "
        "another holder; sent SIGTERM to {} (pid {}) and every process it started, SIGKILL "
        "follows in {}",
        key, lease.token().value(), program, child.pid, kill_follows()));
  };
  hooks.on_lease_at_risk = [&](milliseconds left) {
    reporter.note(fmt::format(
        "lease on '{}' (token {}) has not been renewed and has {} of validity left; sent SIGTERM "
        "to {} (pid {}) and every process it started, SIGKILL follows in {}",
        key, lease.token().value(), detail::format_duration(std::max(left, milliseconds(0))),
        program, child.pid, kill_follows()));
  };
  hooks.on_kill = [&](bool at_validity) {
    reporter.note(at_validity ? fmt::format("{} (pid {}) or a process it started was still "
                                            "running when the lease's validity ended; sent "
                                            "SIGKILL to all of them",
                                            program, child.pid)
                              : fmt::format("{} (pid {}) or a process it started did not exit "
                                            "within {} of SIGTERM; sent SIGKILL to all of them",
                                            program, child.pid,
                                            detail::format_duration(settings.kill_grace)));
  };
  hooks.on_leftovers = [&](int count) {
    reporter.note(fmt::format(
        "{} exited but left {} process{} running; sent SIGTERM (SIGKILL follows in {}); "
        "'{}' is released when the last one has exited",
        program, count, count == 1 ? "" : "es", kill_follows(), key));
  };
  hooks.on_guardian_lost = [&] {
    reporter.note(fmt::format(
        "the guardian process (pid {}) exited while {} ran; without it a stopped fencelock could "
        "let {} run past the lease on '{}': sent SIGTERM to {} (pid {}) and every process it "
        "started, SIGKILL follows in {}",
        guardian.pid(), program, program, key, program, child.pid, kill_follows()));
  };
  ChildExit exit = supervise_command(child.pid, signals, lost_fd->get(), settings.kill_grace,
                                     deadline, hooks, &guardian, terminal.get());
  guardian.stand_down();

  const int command_code = shell_exit_code(exit.wait_status);
  if (exit.guardian_killed && !exit.sent_sigkill) {
    reporter.note(fmt::format(
        "lease on '{}' (token {}) reached the end of its validity while fencelock (pid {}) was "
        "not running (stopped or frozen); the guardian (pid {}) sent SIGKILL to {} (pid {}) and "
        "every process it started",
        key, lease.token().value(), ::getpid(), guardian.pid(), program, child.pid));
  }
  // Lost after the command's last moment but before we saw it exit: it may have run unprotected.
  // The guardian's SIGKILL came at the end of the validity: the lease is lost too.
  const bool lost =
      exit.lease_lost || exit.lease_at_risk || exit.guardian_killed || lease.is_lost();
  if (lost && !exit.lease_lost && !exit.lease_at_risk && !exit.guardian_killed) {
    reporter.note(
        fmt::format("lease on '{}' was lost while {} ran; it exited with {} before "
                    "fencelock could stop it",
                    key, program, command_code));
  }
  Status released = lease.release();
  if (!released.ok() && !lost) {
    reporter.note(fmt::format("warning: could not release '{}': {}; it expires by its TTL", key,
                              released.to_string()));
    summary["release_error"] = released.to_string();
  }

  const int code = lost ? kExitLeaseLost : exit.guardian_lost ? kExitSoftware : command_code;
  if (reporter.json()) {
    summary["exit_code"] = code;
    summary["command_exit_code"] = command_code;
    summary["lease_lost"] = lost;
    summary["killed"] = exit.sent_sigkill || exit.guardian_killed;
    summary["lease_at_risk"] = exit.lease_at_risk;
    summary["leftover_processes"] = exit.leftovers;
    summary["guardian_killed"] = exit.guardian_killed;
    summary["guardian_lost"] = exit.guardian_lost;
    std::fputs((json_line(summary) + "\n").c_str(), stderr);
  }
  return code;
}

// Everything after connect_and_acquire(): reports a failed connection or acquisition, or runs the
// command under the lease. Returns the exit code of fencelock run.
int supervise_or_report(const RunArgs& args, const RunSettings& settings,
                        const BackendChoice& backend, Acquisition& got, SignalChannel& signals,
                        Guardian& guardian, const Reporter& reporter,
                        const nlohmann::json& fields) {
  if (got.interrupted_by != 0) {
    if (got.lease && got.lease->ok()) {
      Status released = got.lease->value().release();
      (void)released;
    }
    return reporter.fail(kExitSignalBase + got.interrupted_by, "interrupted",
                         fmt::format("interrupted by {} while acquiring '{}'; the command was "
                                     "not run and nothing is held",
                                     signal_name(got.interrupted_by), args.key),
                         fields);
  }
  if (!got.client->ok()) {
    const Status status = got.client->status();
    return reporter.fail(exit_code_for(status.code()), std::string(code_name(status.code())),
                         explain_connect_failure(status, backend) + "; the command was not run",
                         fields);
  }
  if (!got.lease->ok()) {
    const Status status = got.lease->status();
    std::string message = status.code() == Code::kLocked
                              ? not_acquired_message(status, settings.acquire.wait)
                              : explain_failure(status, backend) + "; the command was not run";
    return reporter.fail(exit_code_for(status.code()), std::string(code_name(status.code())),
                         message, fields);
  }
  return supervise_under_lease(args, settings, got.lease->value(), got.client->value().describe(),
                               signals, guardian, reporter);
}

}  // namespace

int run_command(const RunArgs& args) {
  Reporter reporter(args.json);
  nlohmann::json fields = {{"key", args.key}};
  auto settings = parse_settings(args);
  if (!settings.ok()) {
    return reporter.fail(kExitUsage, "usage",
                         settings.status().message() + "; see 'fencelock run --help'", fields);
  }
  BackendChoice backend = choose_backend(args.backend, args.json);

  // Before Client::connect() starts the library's threads (SignalChannel's and Guardian's
  // contract; the namespace probe forks too).
  if (args.pid_namespace) {
    if (std::string refusal = pid_namespace::refusal(); !refusal.empty()) {
      return reporter.fail(kExitUnavailable, "pid_namespace", refusal + "; nothing was acquired",
                           fields);
    }
  }
  auto signals = SignalChannel::open();
  if (!signals.ok()) {
    return reporter.fail(kExitSoftware, "internal", signals.status().to_string(), fields);
  }
  Guardian guardian = Guardian::start();
  if (!guardian.active()) {
    return reporter.fail(kExitSoftware, "internal",
                         fmt::format("cannot start the process guardian: {}; nothing was acquired",
                                     detail::errno_text(errno)),
                         fields);
  }
  // Orphans of the command's tree are re-parented to fencelock, which ends them.
  if (std::string failed = become_subreaper(); !failed.empty()) {
    return reporter.fail(kExitSoftware, "internal", failed + "; nothing was acquired", fields);
  }
  const auto started = std::chrono::steady_clock::now();
  Acquisition got =
      connect_and_acquire(backend.uri, args.json, settings->key, settings->acquire, *signals);
  const int code =
      supervise_or_report(args, *settings, backend, got, *signals, guardian, reporter, fields);
  // The command has exited and the lease is released (or lost): the metrics count both.
  if (!args.metrics_file.empty() && got.client && got.client->ok()) {
    write_metrics(
        args.metrics_file,
        run_metrics(args.metrics_file, args.key, std::chrono::steady_clock::now() - started, code),
        got.client->value(), reporter);
  }
  return code;
}

}  // namespace fencelock::cli

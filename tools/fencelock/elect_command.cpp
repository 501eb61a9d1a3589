#include "elect_command.h"

#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "acquisition.h"
#include "backend_choice.h"
#include "connect_warnings.h"
#include "core/duration.h"
#include "core/mutex.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "fencelock/election.h"
#include "reporter.h"
#include "signals.h"
#include "terminal_text.h"

namespace fencelock::cli {
namespace {

void print_line(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::string default_value() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}", host, static_cast<long>(getpid()));
}

nlohmann::json leader_json(const std::string& name, const std::optional<LeaderInfo>& leader) {
  nlohmann::json out = {{"election", name}, {"leader", nullptr}};
  if (leader) {
    out["leader"] = {
        {"value", leader->value}, {"token", leader->token.value()}, {"key", leader->key}};
  }
  return out;
}

std::string leader_text(const std::string& name, const std::optional<LeaderInfo>& leader) {
  if (!leader) return fmt::format("{}: no leader", terminal_safe(name));
  return fmt::format("{}: {} (token {})", terminal_safe(name), terminal_safe(leader->value),
                     leader->token.value());
}

int fail_with(const Reporter& reporter, const Status& status, const std::string& message,
              const nlohmann::json& fields) {
  return reporter.fail(exit_code_for(status.code()), std::string(code_name(status.code())), message,
                       fields);
}

// Blocks until the leadership is lost or `stop` fires.
void hold(const Leadership& leadership, std::stop_token stop) {
  fencelock::detail::Mutex mu;
  std::condition_variable_any cv;
  std::stop_callback on_lost(leadership.lost(), [&] {
    fencelock::detail::MutexLock lock(mu);
    cv.notify_all();
  });
  fencelock::detail::MutexLock lock(mu);
  cv.wait(lock, stop, [&] { return leadership.is_lost(); });
}

int observe(const ElectArgs& args, const BackendChoice& backend, SignalChannel& signals,
            const Reporter& reporter, const nlohmann::json& fields) {
  std::optional<Result<Client>> client;
  Status outcome;
  run_cancellable(signals, [&](std::stop_token stop) {
    client.emplace(connect_with_warnings(backend.uri, args.json));
    if (!client->ok()) return;
    auto election = Election::make(client->value(), args.name);
    if (!election.ok()) {
      outcome = election.status();
      return;
    }
    outcome = election->observe(
        [&](const std::optional<LeaderInfo>& leader) {
          print_line(args.json ? json_line(leader_json(args.name, leader))
                               : leader_text(args.name, leader));
        },
        stop);
  });
  if (client && !client->ok()) {
    return fail_with(reporter, client->status(), explain_connect_failure(client->status(), backend),
                     fields);
  }
  if (!outcome.ok()) return fail_with(reporter, outcome, explain_failure(outcome, backend), fields);
  return kExitOk;
}

int campaign(const ElectArgs& args, const CampaignOptions& options, const BackendChoice& backend,
             SignalChannel& signals, const Reporter& reporter, nlohmann::json fields) {
  const std::string value = args.value.empty() ? default_value() : args.value;
  std::optional<Result<Client>> client;
  std::optional<Result<Leadership>> leadership;
  const int interrupted = run_cancellable(signals, [&](std::stop_token stop) {
    client.emplace(connect_with_warnings(backend.uri, args.json));
    if (!client->ok()) return;
    auto election = Election::make(client->value(), args.name);
    if (!election.ok()) {
      leadership.emplace(election.status());
      return;
    }
    CampaignOptions cancellable = options;
    cancellable.stop = stop;
    leadership.emplace(election->campaign(value, cancellable));
  });
  if (interrupted != 0) {
    if (leadership && leadership->ok()) (void)leadership->value().resign();
    return reporter.fail(kExitSignalBase + interrupted, "interrupted",
                         fmt::format("interrupted by {} while campaigning in '{}'; not leader, "
                                     "nothing left behind",
                                     signal_name(interrupted), args.name),
                         fields);
  }
  if (!client->ok()) {
    return fail_with(reporter, client->status(), explain_connect_failure(client->status(), backend),
                     fields);
  }
  if (!leadership->ok()) {
    const Status& status = leadership->status();
    std::string message = status.code() == Code::kLocked
                              ? fmt::format("{}; not elected within {}", status.to_string(),
                                            detail::format_duration(options.wait))
                              : explain_failure(status, backend);
    return fail_with(reporter, status, message, fields);
  }
  Leadership& leader = leadership->value();
  fields["token"] = leader.token().value();
  fields["value"] = value;
  print_line(args.json
                 ? json_line(nlohmann::json{{"elected", true},
                                            {"election", args.name},
                                            {"value", value},
                                            {"token", leader.token().value()}})
                 : fmt::format("elected: {} is the leader of '{}' (token {})", terminal_safe(value),
                               terminal_safe(args.name), leader.token().value()));
  const int signal = run_cancellable(signals, [&](std::stop_token stop) { hold(leader, stop); });
  if (signal == 0 || leader.is_lost()) {
    return reporter.fail(kExitLeaseLost, "lease_lost",
                         fmt::format("leadership of '{}' lost (token {}): the session could not "
                                     "be renewed, another campaigner may lead now",
                                     args.name, leader.token().value()),
                         fields);
  }
  Status resigned = leader.resign();
  if (!resigned.ok()) {
    reporter.note(
        fmt::format("warning: could not resign from '{}': {}; the leadership ends "
                    "with the session TTL",
                    args.name, resigned.to_string()));
  }
  if (args.json) {
    fields["resigned"] = resigned.ok();
    fields["exit_code"] = kExitOk;
    std::fputs((json_line(fields) + "\n").c_str(), stderr);
  }
  return kExitOk;
}

}  // namespace

int elect_command(const ElectArgs& args) {
  Reporter reporter(args.json);
  nlohmann::json fields = {{"election", args.name}};
  if (auto name = LockKey::make(args.name); !name.ok()) {
    return reporter.fail(
        kExitUsage, "usage",
        fmt::format("invalid NAME: {}; see 'fencelock elect --help'", name.status().message()),
        fields);
  }
  CampaignOptions options;
  auto ttl = parse_duration_option("--ttl", args.ttl);
  if (!ttl.ok()) {
    return reporter.fail(kExitUsage, "usage", ttl.status().message(), fields);
  }
  options.ttl = *ttl;
  if (!args.wait.empty()) {
    auto wait = parse_duration_option("--wait", args.wait);
    if (!wait.ok()) return reporter.fail(kExitUsage, "usage", wait.status().message(), fields);
    options.wait = *wait;
  }
  if (args.observe && !args.value.empty()) {
    return reporter.fail(kExitUsage, "usage",
                         "--observe takes only NAME (no VALUE); see 'fencelock elect --help'",
                         fields);
  }
  BackendChoice backend = choose_backend(args.backend, args.json);
  // Before Client::connect() starts the library's threads (SignalChannel's contract).
  auto signals = SignalChannel::open();
  if (!signals.ok()) {
    return reporter.fail(kExitSoftware, "internal", signals.status().to_string(), fields);
  }
  if (args.observe) return observe(args, backend, *signals, reporter, fields);
  return campaign(args, options, backend, *signals, reporter, std::move(fields));
}

}  // namespace fencelock::cli

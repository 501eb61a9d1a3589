#include "inspect_commands.h"

#include <cstdio>

#include <fmt/format.h>

#include "backend_choice.h"
#include "connect_warnings.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "fencelock/client.h"
#include "holder_format.h"
#include "reporter.h"
#include "terminal_text.h"

namespace fencelock::cli {
namespace {

int report_failure(const Reporter& reporter, const Status& status, const std::string& message) {
  return reporter.fail(exit_code_for(status.code()), std::string(code_name(status.code())),
                       message);
}

void print_stdout(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

int status_command(const StatusArgs& args) {
  Reporter reporter(args.json);
  auto key = LockKey::make(args.key);
  if (!key.ok()) {
    return reporter.fail(
        kExitUsage, "usage",
        fmt::format("invalid KEY: {}; see 'fencelock status --help'", key.status().message()));
  }
  BackendChoice backend = choose_backend(args.backend, args.json);
  auto client = connect_with_warnings(backend.uri, args.json);
  if (!client.ok()) {
    return report_failure(reporter, client.status(),
                          explain_connect_failure(client.status(), backend));
  }
  auto holder = client->inspect(*key);
  if (!holder.ok()) {
    return report_failure(reporter, holder.status(), explain_failure(holder.status(), backend));
  }
  print_stdout(args.json ? json_line(status_json(args.key, *holder)) + "\n"
                         : status_text(args.key, *holder));
  return kExitOk;
}

int list_command(const ListArgs& args) {
  Reporter reporter(args.json);
  auto timeout = parse_duration_option("--timeout", args.timeout);
  if (!timeout.ok() || timeout->count() <= 0) {
    return reporter.fail(kExitUsage, "usage",
                         fmt::format("{}; see 'fencelock list --help'",
                                     timeout.ok() ? "--timeout must be greater than 0 (e.g. 30s)"
                                                  : timeout.status().message()));
  }
  if (args.max_locks == 0) {
    return reporter.fail(kExitUsage, "usage",
                         "--max-locks must be at least 1; see 'fencelock list --help'");
  }
  const ListOptions bounds{.timeout = *timeout, .max_locks = args.max_locks};
  BackendChoice backend = choose_backend(args.backend, args.json);
  auto client = connect_with_warnings(backend.uri, args.json);
  if (!client.ok()) {
    return report_failure(reporter, client.status(),
                          explain_connect_failure(client.status(), backend));
  }
  auto holders = [&] {
    ConnectWarnings warnings(args.json);  // held locks left out: names that are not lock keys
    return client->list(args.prefix, bounds);
  }();
  if (!holders.ok()) {
    return report_failure(reporter, holders.status(), explain_failure(holders.status(), backend));
  }
  if (args.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const HolderInfo& h : *holders) array.push_back(holder_json(h));
    print_stdout(json_line(array) + "\n");
  } else if (holders->empty()) {
    print_stdout(args.prefix.empty()
                     ? "no locks held\n"
                     : fmt::format("no locks held under '{}'\n", terminal_safe(args.prefix)));
  } else {
    print_stdout(list_table(*holders));
  }
  return kExitOk;
}

}  // namespace fencelock::cli

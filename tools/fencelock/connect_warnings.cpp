#include "connect_warnings.h"

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "fencelock/log.h"
#include "reporter.h"
#include "terminal_text.h"

namespace fencelock::cli {
namespace {

bool quiet_accepted = false;  // set once, before any ConnectWarnings (main.cpp)

}  // namespace

void set_quiet_accepted_risks(bool quiet) { quiet_accepted = quiet; }

ConnectWarnings::ConnectWarnings(bool json) {
  set_log_sink(
      [json](LogLevel, std::string_view message) {
        if (quiet_accepted && message.find("(accepted: ") != std::string_view::npos) return;
        const std::string line =
            json ? json_line({{"warning", "backend"}, {"message", std::string(message)}})
                 : "fencelock: warning: " + terminal_safe(message);
        std::fputs((line + "\n").c_str(), stderr);
      },
      LogLevel::kWarning);
}

ConnectWarnings::~ConnectWarnings() { set_log_sink({}); }

Result<Client> connect_with_warnings(std::string_view uri, bool json) {
  ConnectWarnings warnings(json);
  return Client::connect(uri);
}

}  // namespace fencelock::cli

#include "reporter.h"

#include <cstdio>

#include <fmt/format.h>

#include "terminal_text.h"

namespace fencelock::cli {
namespace {

// Library messages are one line by contract; this keeps the CLI's "one line per problem" promise
// even if one is not.
std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

void write_stderr_line(std::string_view line) {
  std::fputs(fmt::format("{}\n", line).c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

std::string json_line(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int Reporter::fail(int exit_code, std::string_view error_name, std::string_view message,
                   nlohmann::json fields) const {
  if (json_) {
    fields["error"] = std::string(error_name);
    fields["message"] = one_line(message);
    fields["exit_code"] = exit_code;
    write_stderr_line(json_line(fields));
  } else {
    write_stderr_line("fencelock: " + terminal_safe(message));
  }
  return exit_code;
}

void Reporter::note(std::string_view message) const {
  if (!json_) write_stderr_line("fencelock: " + terminal_safe(message));
}

}  // namespace fencelock::cli

// How the CLI talks to its user on stderr: one line per problem, "fencelock: " first, or one JSON
// object per line in --json mode. Standard output belongs to results (status, list) and, under
// `run`, to the command.
//
// Thread-safety: a Reporter is immutable; writes to stderr are whole lines but may interleave with
// other writers.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fencelock::cli {

// `value` as one line of JSON, lossless for strings of any bytes (keys may hold any byte but
// NUL): valid UTF-8 as it is, each byte that is not part of valid UTF-8 as \udcXX (byte 0xXX as a
// lone low surrogate: Python's json.loads then .encode("utf-8", "surrogateescape") gives the bytes
// back). Before, such bytes became U+FFFD, and "a\xff" and "a\xfe" printed the same.
std::string json_line(const nlohmann::json& value);

class Reporter {
 public:
  explicit Reporter(bool json) : json_(json) {}

  bool json() const { return json_; }

  // Reports a failure and returns `exit_code`, so that callers can `return reporter.fail(...)`.
  // Human mode: "fencelock: MESSAGE". JSON mode: `fields` plus
  // {"error": ERROR_NAME, "message": MESSAGE, "exit_code": EXIT_CODE}.
  int fail(int exit_code, std::string_view error_name, std::string_view message,
           nlohmann::json fields = nlohmann::json::object()) const;

  // A non-fatal message ("fencelock: MESSAGE") in human mode; nothing in JSON mode, where the
  // command's final JSON object carries the same facts.
  void note(std::string_view message) const;

 private:
  bool json_;
};

}  // namespace fencelock::cli

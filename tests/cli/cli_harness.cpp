#include "cli_harness.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

namespace fencelock::testing {
namespace {

std::vector<std::string> with_backend_cleared(std::vector<std::string> env) {
  bool sets_backend = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return e.starts_with("FENCELOCK_BACKEND=");
  });
  if (!sets_backend) env.insert(env.begin(), "FENCELOCK_BACKEND");
  return env;
}

}  // namespace

std::string cli_path() { return FENCELOCK_CLI; }

std::vector<std::string> cli_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

RunResult run_cli(const std::vector<std::string>& args, std::vector<std::string> env,
                  std::chrono::milliseconds timeout) {
  return run_command(cli_argv(args), with_backend_cleared(std::move(env)), "", timeout);
}

ChildProcess spawn_cli(const std::vector<std::string>& args, const std::string& stdout_file,
                       const std::string& stderr_file, std::vector<std::string> env) {
  return ChildProcess::spawn(cli_argv(args), with_backend_cleared(std::move(env)), stdout_file,
                             stderr_file);
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> held_lock_keys(RedisServer& server) {
  std::vector<std::string> held;
  for (const std::string& key : server.keys("fencelock:*")) {
    if (!key.ends_with(":fence")) held.push_back(key);
  }
  return held;
}

std::string without_warnings(const std::string& stderr_text) {
  std::istringstream in(stderr_text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("fencelock: warning: ") || line.find("\"warning\":") != std::string::npos)
      continue;
    out += line + "\n";
  }
  return out;
}

bool is_one_error_line(const std::string& text) {
  return text.starts_with("fencelock: ") && std::count(text.begin(), text.end(), '\n') == 1 &&
         text.ends_with("\n");
}

}  // namespace fencelock::testing

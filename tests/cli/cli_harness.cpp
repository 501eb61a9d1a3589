#include "cli_harness.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace fencelock::testing {
namespace {

std::vector<std::string> with_backend_cleared(std::vector<std::string> env) {
  bool sets_backend = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return e.starts_with("FENCELOCK_BACKEND=");
  });
  if (!sets_backend) env.insert(env.begin(), "FENCELOCK_BACKEND");
  return env;
}

// The pipes ("pipe:[INODE]") among the open descriptors of `pid`.
std::set<std::string> pipes_of(pid_t pid) {
  std::set<std::string> pipes;
  const std::string dir_path = fmt::format("/proc/{}/fd", pid);
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return pipes;
  while (const dirent* entry = ::readdir(dir)) {
    char target[128] = {};
    const std::string link = dir_path + "/" + entry->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string_view(target, static_cast<std::size_t>(n)).starts_with("pipe:")) {
      pipes.emplace(target, static_cast<std::size_t>(n));
    }
  }
  ::closedir(dir);
  return pipes;
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

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

std::optional<pid_t> guardian_of(pid_t fencelock) {
  const std::set<std::string> pipes = pipes_of(fencelock);
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return std::nullopt;
  std::optional<pid_t> found;
  while (const dirent* entry = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atol(entry->d_name));
    if (pid <= 0 || read_file(fmt::format("/proc/{}/comm", pid)) != "fencelock-guard\n") continue;
    const std::set<std::string> theirs = pipes_of(pid);
    if (std::any_of(theirs.begin(), theirs.end(),
                    [&](const std::string& p) { return pipes.count(p) != 0; })) {
      found = pid;
      break;
    }
  }
  ::closedir(dir);
  return found;
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
    // Fencing counters stay, and so do the tombstones of released attempts (for a TTL).
    if (!key.ends_with(":fence") && key.find("}:dead:") == std::string::npos) held.push_back(key);
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

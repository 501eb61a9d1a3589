#include "process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "core/errno_text.h"

namespace fencelock::cli {
namespace {

struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  bool zombie = false;
};

// Parses /proc/PID/stat: "pid (comm) state ppid pgrp ...". comm may hold spaces and ')'.
bool read_stat(pid_t pid, ProcStat& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* file = std::fopen(path, "re");
  if (file == nullptr) return false;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, file);
  std::fclose(file);
  std::string_view text(buf, n);
  const auto close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return false;
  text.remove_prefix(close + 2);  // "S ppid pgrp ..."
  out.pid = pid;
  out.zombie = text.front() == 'Z' || text.front() == 'X';
  text.remove_prefix(1);
  long fields[2] = {0, 0};
  for (long& field : fields) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), field);
    if (ec != std::errc()) return false;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  out.ppid = static_cast<pid_t>(fields[0]);
  out.pgrp = static_cast<pid_t>(fields[1]);
  return true;
}

std::vector<ProcStat> all_processes() {
  std::vector<ProcStat> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (const dirent* entry = ::readdir(dir)) {
    int pid = 0;
    const char* name = entry->d_name;
    auto [end, ec] = std::from_chars(name, name + std::strlen(name), pid);
    if (ec != std::errc() || *end != '\0' || pid <= 0) continue;
    ProcStat stat;
    if (read_stat(pid, stat)) out.push_back(stat);
  }
  ::closedir(dir);
  return out;
}

}  // namespace

ProcessTree::ProcessTree(pid_t root) : root_(root), owner_(::getpid()) {}

std::vector<pid_t> ProcessTree::members() const {
  std::vector<pid_t> zombies;
  return census(zombies);
}

std::vector<pid_t> ProcessTree::members_settled() const {
  std::vector<pid_t> before;
  std::vector<pid_t> living = census(before);
  for (int scan = 1; scan < 1000 && living.empty(); ++scan) {
    std::vector<pid_t> zombies;
    living = census(zombies);
    if (!living.empty()) break;
    std::sort(zombies.begin(), zombies.end());
    if (std::includes(before.begin(), before.end(), zombies.begin(), zombies.end())) break;
    before = std::move(zombies);
    ::sched_yield();
  }
  return living;
}

std::vector<pid_t> ProcessTree::census(std::vector<pid_t>& zombies) const {
  const pid_t self = ::getpid();
  const std::vector<ProcStat> procs = all_processes();
  std::unordered_map<pid_t, pid_t> parent;
  parent.reserve(procs.size());
  for (const ProcStat& p : procs) parent[p.pid] = p.ppid;
  auto descends_from_root = [&](pid_t pid) {
    // Bounded walk: a pid table has no cycles, but /proc is read while it changes.
    for (int depth = 0; depth < 4096 && pid > 1; ++depth) {
      if (pid == root_) return true;
      auto it = parent.find(pid);
      if (it == parent.end()) return false;
      pid = it->second;
    }
    return false;
  };
  std::vector<pid_t> out;
  zombies.clear();
  for (const ProcStat& p : procs) {
    if (p.pid == self || p.pid == owner_) continue;
    if (p.pgrp == root_ || (owner_ > 0 && p.ppid == owner_) || descends_from_root(p.pid)) {
      (p.zombie ? zombies : out).push_back(p.pid);
    }
  }
  std::sort(zombies.begin(), zombies.end());
  return out;
}

int ProcessTree::signal(int signo) const {
  ::kill(-root_, signo);
  const std::vector<pid_t> pids = members();
  for (pid_t pid : pids) ::kill(pid, signo);
  return static_cast<int>(pids.size());
}

int ProcessTree::signal_and_continue(int signo) const {
  ::kill(-root_, signo);
  ::kill(-root_, SIGCONT);
  const std::vector<pid_t> pids = members();
  for (pid_t pid : pids) {
    ::kill(pid, signo);
    ::kill(pid, SIGCONT);
  }
  return static_cast<int>(pids.size());
}

bool reap_children(pid_t root, bool report_stops, int& root_status, bool& stopped) {
  bool root_seen = false;
  stopped = false;
  if (report_stops) {
    int status = 0;
    if (::waitpid(root, &status, WNOHANG | WUNTRACED) == root) {
      root_status = status;
      root_seen = true;
      stopped = WIFSTOPPED(status);
    }
  }
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: children left, none exited; -1: no children (or EINTR)
    if (pid == root) {
      root_status = status;
      root_seen = true;
      stopped = false;
    }
  }
  return root_seen;
}

std::string become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0) return "";
  return fmt::format("cannot become a child subreaper: {}", detail::errno_text(errno));
}

namespace pid_namespace {
namespace {

bool with_user_namespace() { return ::geteuid() != 0; }

bool unshare_in_path() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    const std::string candidate = fmt::format("{}/unshare", dir.empty() ? "." : dir);
    if (::access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::string refusal() {
  if (!unshare_in_path()) {
    return "--pid-namespace needs util-linux's 'unshare' in PATH (Debian: apt-get install "
           "util-linux)";
  }
  const int flags = CLONE_NEWPID | (with_user_namespace() ? CLONE_NEWUSER : 0);
  const pid_t probe = ::fork();
  if (probe < 0) return fmt::format("--pid-namespace: cannot fork: {}", detail::errno_text(errno));
  if (probe == 0) _exit(::unshare(flags) == 0 ? 0 : (errno & 0xff));
  int status = 0;
  while (::waitpid(probe, &status, 0) < 0 && errno == EINTR) {
  }
  const int err = WIFEXITED(status) ? WEXITSTATUS(status) : EINVAL;
  if (err == 0) return "";
  return fmt::format(
      "--pid-namespace: the kernel refuses a new {}PID namespace here: {}; {}",
      with_user_namespace() ? "user and " : "", detail::errno_text(err),
      with_user_namespace()
          ? "unprivileged user namespaces may be disabled (sysctl user.max_user_namespaces, "
            "kernel.unprivileged_userns_clone, or an AppArmor/seccomp policy); run without "
            "--pid-namespace"
          : "run without --pid-namespace");
}

std::vector<std::string> wrap(const std::vector<std::string>& command) {
  std::vector<std::string> out = {"unshare"};
  if (with_user_namespace()) {
    out.emplace_back("--user");
    out.emplace_back("--map-current-user");
  }
  for (const char* arg : {"--pid", "--fork", "--kill-child=SIGKILL", "--"}) out.emplace_back(arg);
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

}  // namespace pid_namespace
}  // namespace fencelock::cli

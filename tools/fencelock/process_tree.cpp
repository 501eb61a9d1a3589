#include "process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
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

// Parses /proc/PID/stat: "pid (comm) state ppid pgrp ... num_threads ...". comm may hold spaces
// and ')'. A process whose main thread exited while other threads run shows the main thread's
// state, Z: it is a zombie only when no other thread is left (num_threads, the 20th field, is
// then 1). Read with open/read (no stdio buffer to allocate: a scan reads thousands).
bool read_stat(pid_t pid, ProcStat& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  std::string_view text(buf, static_cast<std::size_t>(n));
  const auto close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return false;
  text.remove_prefix(close + 2);  // "S ppid pgrp ..."
  out.pid = pid;
  const bool dead_main_thread = text.front() == 'Z' || text.front() == 'X';
  text.remove_prefix(1);
  // Fields 4 (ppid) to 20 (num_threads), all integers.
  long fields[17] = {};
  for (long& field : fields) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), field);
    if (ec != std::errc()) return false;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  out.ppid = static_cast<pid_t>(fields[0]);
  out.pgrp = static_cast<pid_t>(fields[1]);
  out.zombie = dead_main_thread && fields[16] <= 1;
  return true;
}

// Calls `visit` with the pid of every process in /proc, in pid order. /proc is listed a few entries
// at a time, each read as soon as it is listed: a listing is a snapshot of the pids in its range,
// so a larger one (readdir's 32 KiB) misses a process created in its range after it was taken
// (after the pid counter wrapped, a new pid can fall below older ones), and one that takes
// milliseconds to read through lets work that keeps moving to new pids slip through it every time.
// Stops early (false) once the steady clock passes `stop_by`, checked every few entries.
template <typename Visit>
bool for_each_process(Visit&& visit, std::chrono::steady_clock::time_point stop_by =
                                         std::chrono::steady_clock::time_point::max()) {
  const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return true;
  alignas(8) char buf[128];
  const bool bounded = stop_by != std::chrono::steady_clock::time_point::max();
  unsigned seen = 0;
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buf + at);
      at += entry->d_reclen;
      int pid = 0;
      const char* name = entry->d_name;
      auto [end, ec] = std::from_chars(name, name + std::strlen(name), pid);
      if (ec != std::errc() || *end != '\0' || pid <= 0) continue;
      if (bounded && (++seen % 32) == 0 && std::chrono::steady_clock::now() >= stop_by) {
        ::close(dir);
        return false;
      }
      visit(static_cast<pid_t>(pid));
    }
  }
  ::close(dir);
  return true;
}

}  // namespace

ProcessTree::ProcessTree(pid_t root) : root_(root), owner_(::getpid()) {}

std::vector<pid_t> ProcessTree::members() const {
  std::vector<pid_t> zombies;
  return census(zombies, 0, {});
}

std::vector<pid_t> ProcessTree::members(std::vector<pid_t>& zombies,
                                        std::chrono::steady_clock::time_point stop_by) const {
  return census(zombies, 0, {}, stop_by);
}

std::vector<pid_t> ProcessTree::members_settled() const {
  std::vector<pid_t> before;
  std::vector<pid_t> living = census(before, 0, {});
  for (int scan = 1; scan < kMaxScans && living.empty(); ++scan) {
    std::vector<pid_t> zombies;
    living = census(zombies, 0, {});
    if (!living.empty()) break;
    if (std::includes(before.begin(), before.end(), zombies.begin(), zombies.end())) break;
    before = std::move(zombies);
    ::sched_yield();
  }
  return living;
}

std::vector<pid_t> ProcessTree::signal_settled(int signo, std::vector<pid_t> known_zombies) const {
  ::kill(-root_, signo);
  std::vector<pid_t> zombies_before = std::move(known_zombies);
  std::vector<pid_t> signalled;  // sorted: every living member signalled by an earlier scan
  std::vector<pid_t> living;
  for (int scan = 0; scan < kMaxScans; ++scan) {
    std::vector<pid_t> zombies;
    living = census(zombies, signo, zombies_before);
    std::sort(living.begin(), living.end());
    const bool no_new_living =
        std::includes(signalled.begin(), signalled.end(), living.begin(), living.end());
    // A process signalled before may die at any time (it could not fork since): only a zombie
    // that was neither one the scan before nor signalled is new.
    const bool no_new_zombie = std::all_of(zombies.begin(), zombies.end(), [&](pid_t pid) {
      return std::binary_search(zombies_before.begin(), zombies_before.end(), pid) ||
             std::binary_search(signalled.begin(), signalled.end(), pid);
    });
    if (scan > 0 && no_new_living && no_new_zombie) break;
    std::vector<pid_t> merged;
    std::set_union(signalled.begin(), signalled.end(), living.begin(), living.end(),
                   std::back_inserter(merged));
    signalled = std::move(merged);
    zombies_before = std::move(zombies);
  }
  return living;
}

std::vector<pid_t> ProcessTree::census(std::vector<pid_t>& zombies, int on_sight,
                                       const std::vector<pid_t>& known_zombies,
                                       std::chrono::steady_clock::time_point stop_by) const {
  const pid_t self = ::getpid();
  // What is known of this scan so far: each process's parent, and the memberships decided.
  std::unordered_map<pid_t, pid_t> parent;
  std::unordered_map<pid_t, bool> decided;
  // Whether `pid` is a member by descent: it is the root, or a child of the owner, or its parent
  // is a member. nullopt while an ancestor has not been read yet (a parent with a higher pid,
  // after the pid counter wrapped); `complete` treats an unread ancestor as gone.
  auto descends = [&](pid_t pid, bool complete) -> std::optional<bool> {
    std::vector<pid_t> walked;
    std::optional<bool> answer;
    // Bounded walk: a pid table has no cycles, but /proc is read while it changes.
    for (int depth = 0; depth < 4096 && !answer; ++depth) {
      if (pid <= 1 || pid == self || pid == owner_) break;  // not a member
      if (pid == root_) {
        answer = true;
        break;
      }
      if (auto known = decided.find(pid); known != decided.end()) {
        answer = known->second;
        break;
      }
      auto up = parent.find(pid);
      if (up == parent.end()) {
        if (!complete) return std::nullopt;
        break;  // gone: not a member
      }
      if (owner_ > 0 && up->second == owner_) {
        answer = true;
        break;
      }
      walked.push_back(pid);
      pid = up->second;
    }
    const bool member = answer.value_or(false);
    for (pid_t p : walked) decided[p] = member;
    return member;
  };
  std::vector<pid_t> out;
  std::vector<ProcStat> undecided;
  zombies.clear();
  auto add = [&](const ProcStat& p) {
    if (p.zombie) {
      zombies.push_back(p.pid);
      return;
    }
    // At once, while the process is where the scan found it: a process that forks and exits
    // between being read and being signalled would leave its child unsignalled.
    if (on_sight != 0) ::kill(p.pid, on_sight);
    out.push_back(p.pid);
  };
  for_each_process(
      [&](pid_t pid) {
        // A zombie stays one until it is reaped, and nothing reaps while fencelock is stopped; its
        // children were re-parented when it exited, so its parent does not matter either.
        if (std::binary_search(known_zombies.begin(), known_zombies.end(), pid)) {
          zombies.push_back(pid);
          return;
        }
        ProcStat p;
        if (!read_stat(pid, p)) return;
        parent[p.pid] = p.ppid;
        if (p.pid == self || p.pid == owner_) {
          decided[p.pid] = false;
          return;
        }
        std::optional<bool> member =
            p.pgrp == root_ ? std::optional<bool>(true) : descends(p.pid, false);
        if (!member) {
          undecided.push_back(p);
          return;
        }
        decided[p.pid] = *member;
        if (*member) add(p);
      },
      stop_by);
  for (const ProcStat& p : undecided) {
    if (descends(p.pid, true).value_or(false)) add(p);
  }
  std::sort(zombies.begin(), zombies.end());
  return out;
}

int ProcessTree::kill_children_of_owner() const {
  if (owner_ <= 0) return 0;
  const std::string tasks = fmt::format("/proc/{}/task", owner_);
  const auto until = std::chrono::steady_clock::now() + kChildPassesFor;
  std::vector<pid_t> killed;  // sorted
  // The first pass always; more while one found a child it had not killed, until `until`.
  for (bool fresh = true, first = true;
       fresh && (first || std::chrono::steady_clock::now() < until); first = false) {
    fresh = false;
    DIR* dir = ::opendir(tasks.c_str());
    if (dir == nullptr) break;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string path = fmt::format("{}/{}/children", tasks, entry->d_name);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      std::string text;
      char buf[16384];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
        text.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
      const char* at = text.data();
      const char* const end = text.data() + text.size();
      while (at < end) {
        int pid = 0;
        auto [next, ec] = std::from_chars(at, end, pid);
        if (ec != std::errc()) {
          ++at;  // the separating space
          continue;
        }
        at = next;
        if (pid <= 1) continue;
        auto slot = std::lower_bound(killed.begin(), killed.end(), pid);
        if (slot != killed.end() && *slot == pid) continue;
        ::kill(pid, SIGKILL);
        killed.insert(slot, pid);
        fresh = true;
      }
    }
    ::closedir(dir);
  }
  return static_cast<int>(killed.size());
}

int ProcessTree::signal(int signo) const {
  ::kill(-root_, signo);
  std::vector<pid_t> zombies;
  return static_cast<int>(census(zombies, signo, {}).size());
}

int ProcessTree::signal_and_continue(int signo) const {
  ::kill(-root_, signo);
  ::kill(-root_, SIGCONT);
  std::vector<pid_t> zombies;
  const std::vector<pid_t> pids = census(zombies, signo, {});
  for (pid_t pid : pids) ::kill(pid, SIGCONT);
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

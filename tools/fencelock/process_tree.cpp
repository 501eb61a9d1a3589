#include "process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

std::vector<pid_t> ProcessTree::members() const {
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
  for (const ProcStat& p : procs) {
    if (p.zombie || p.pid == self) continue;
    if (p.pgrp == root_ || p.ppid == self || descends_from_root(p.pid)) out.push_back(p.pid);
  }
  return out;
}

int ProcessTree::signal(int signo) const {
  ::kill(-root_, signo);
  const std::vector<pid_t> pids = members();
  for (pid_t pid : pids) ::kill(pid, signo);
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

namespace {

// The guardian's whole life; only async-signal-safe calls (it may be forked from a process
// that has threads, though start() asks for none).
[[noreturn]] void guard(int read_fd) {
  ::setsid();  // out of fencelock's process group and terminal: their signals do not reach it
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int signo :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::sigaction(signo, &ignore, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  // Keep only the pipe: inherited sockets must not outlive fencelock in this process.
  if (read_fd > 0) ::close_range(0, static_cast<unsigned>(read_fd) - 1, 0);
  ::close_range(static_cast<unsigned>(read_fd) + 1, ~0U, 0);
  pid_t pgid = 0;
  std::size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(&pgid);
  while (got < sizeof pgid) {
    const ssize_t n = ::read(read_fd, bytes + got, sizeof pgid - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // fencelock ended before starting a command
    got += static_cast<std::size_t>(n);
  }
  for (;;) {
    char done = 0;
    const ssize_t n = ::read(read_fd, &done, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && pgid > 1) ::kill(-pgid, SIGKILL);  // EOF: fencelock died with the tree alive
    _exit(0);
  }
}

}  // namespace

Guardian Guardian::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  // Double fork: the guardian is re-parented to init at once, so it is never a child of
  // fencelock (which reaps every child) nor a member of the command's tree.
  const pid_t middle = ::fork();
  if (middle < 0) return {};
  if (middle == 0) {
    ::close(write_end.get());
    if (::fork() == 0) guard(read_end.get());
    _exit(0);
  }
  int status = 0;
  while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  return Guardian(std::move(write_end));
}

void Guardian::arm(pid_t pgid) {
  if (!active()) return;
  if (::write(fd_.get(), &pgid, sizeof pgid) != static_cast<ssize_t>(sizeof pgid)) fd_.reset();
}

void Guardian::stand_down() {
  if (!active()) return;
  const char done = 'd';
  ssize_t ignored = ::write(fd_.get(), &done, 1);
  (void)ignored;
  fd_.reset();
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

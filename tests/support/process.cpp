#include "support/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_errno(std::string_view what, int err = errno) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::generic_category().message(err)));
}

// Owns one file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

struct Pipe {
  Fd read_end;
  Fd write_end;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throw_errno("fcntl(O_NONBLOCK)");
}

Fd open_output_file(const std::string& path) {
  if (path.empty()) return Fd();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(fmt::format("cannot open '{}' for the child's output", path));
  return Fd(fd);
}

std::string env_name(std::string_view entry) {
  return std::string(entry.substr(0, entry.find('=')));
}

// The test's environment with `extra` applied ("NAME=VALUE" sets, "NAME" removes).
std::vector<std::string> build_environment(const std::vector<std::string>& extra) {
  std::set<std::string> replaced;
  for (const auto& entry : extra) replaced.insert(env_name(entry));
  std::vector<std::string> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    if (!replaced.contains(env_name(*p))) env.emplace_back(*p);
  }
  for (const auto& entry : extra) {
    if (entry.find('=') != std::string::npos) env.push_back(entry);
  }
  return env;
}

std::vector<char*> null_terminated(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int max_inherited_fd() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 65536;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
}

// Everything the child needs between fork and exec, prepared before fork: after fork only
// async-signal-safe calls are allowed (the test binary may have other threads holding locks).
struct ExecPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<char*> envp;
  int stdio[3] = {-1, -1, -1};  // -1 = inherit
  int error_pipe = -1;          // receives errno if exec fails
  int max_fd = 0;
  bool die_with_parent = false;
  pid_t parent = 0;
};

[[noreturn]] void child_fail(int error_pipe) noexcept {
  int err = errno;
  [[maybe_unused]] ssize_t n = ::write(error_pipe, &err, sizeof err);
  ::_exit(127);
}

void close_inherited_fds(int keep, int max_fd) noexcept {
#ifdef SYS_close_range
  bool low_ok =
      keep == 3 || ::syscall(SYS_close_range, 3U, static_cast<unsigned>(keep - 1), 0U) == 0;
  if (low_ok && ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0U, 0U) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

[[noreturn]] void exec_child(const ExecPlan& plan) noexcept {
  ::setpgid(0, 0);
  if (plan.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != plan.parent) ::_exit(127);  // the parent died before prctl took effect
  }
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2}) {
    ::sigaction(sig, &dfl, nullptr);
  }
  for (int target = 0; target < 3; ++target) {
    if (plan.stdio[target] >= 0 && ::dup2(plan.stdio[target], target) < 0)
      child_fail(plan.error_pipe);
  }
  close_inherited_fds(plan.error_pipe, plan.max_fd);
  ::execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  child_fail(plan.error_pipe);
}

// Forks and execs; returns the pid once exec has succeeded, throws if it failed.
pid_t launch(ExecPlan& plan, const std::string& display_name) {
  Pipe errors = make_pipe();
  plan.error_pipe = errors.write_end.get();
  plan.max_fd = max_inherited_fd();
  plan.parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) exec_child(plan);
  ::setpgid(pid, pid);  // also in the parent, so signal_group() works as soon as we return
  errors.write_end.reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(errors.read_end.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return pid;  // EOF: exec closed the close-on-exec pipe
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  throw_errno(fmt::format("cannot start '{}'", display_name), child_errno);
}

// True once `pid` has exited; does not reap it, so its pid and process group id stay reserved.
bool exited_without_reaping(pid_t pid) {
  siginfo_t info{};
  int r;
  do {
    r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (r < 0 && errno == EINTR);
  return r < 0 || info.si_pid == pid;
}

int exit_code_from(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

// write(2) that reports EPIPE instead of killing the test binary with SIGPIPE.
ssize_t write_without_sigpipe(int fd, std::string_view data) {
  sigset_t pipe_only;
  sigset_t old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ssize_t n = ::write(fd, data.data(), data.size());
  int err = errno;
  if (n < 0 && err == EPIPE) {
    timespec zero{};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) > 0) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

// Reads what is available; closes `fd` at EOF or on error.
void drain(Fd& fd, std::string& sink) {
  char buffer[16384];
  while (fd.is_open()) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) {
      sink.append(buffer, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      fd.reset();
    }
  }
}

// Writes as much of `pending` as the pipe takes; closes `fd` when done or the reader is gone.
void feed(Fd& fd, std::string_view& pending) {
  while (fd.is_open() && !pending.empty()) {
    ssize_t n = write_without_sigpipe(fd.get(), pending.substr(0, 65536));
    if (n > 0) {
      pending.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      fd.reset();
    }
  }
  if (pending.empty()) fd.reset();
}

// Polls the open pipes for up to `wait`, then services whichever are ready.
void pump(Fd& in, std::string_view& pending, Fd& out, std::string& out_text, Fd& err,
          std::string& err_text, std::chrono::milliseconds wait) {
  pollfd fds[3] = {{in.get(), POLLOUT, 0}, {out.get(), POLLIN, 0}, {err.get(), POLLIN, 0}};
  // poll() ignores entries with a negative fd, so closed pipes drop out by themselves.
  int ready = ::poll(fds, 3, static_cast<int>(wait.count()));
  if (ready <= 0) return;
  if (fds[0].revents != 0) feed(in, pending);
  if (fds[1].revents != 0) drain(out, out_text);
  if (fds[2].revents != 0) drain(err, err_text);
}

}  // namespace

ChildProcess ChildProcess::spawn(std::vector<std::string> argv, std::vector<std::string> extra_env,
                                 std::string stdout_file, std::string stderr_file) {
  SpawnOptions options;
  options.extra_env = std::move(extra_env);
  options.stdout_file = std::move(stdout_file);
  options.stderr_file = std::move(stderr_file);
  return spawn_with(std::move(argv), options);
}

ChildProcess ChildProcess::spawn_with(std::vector<std::string> argv, const SpawnOptions& options) {
  if (argv.empty()) throw std::runtime_error("ChildProcess::spawn: empty argv");
  auto path = find_executable(argv[0]);
  if (!path) {
    throw std::runtime_error(fmt::format(
        "cannot start '{}': {}", argv[0],
        argv[0].find('/') == std::string::npos ? "not found in PATH" : "no such executable file"));
  }
  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.is_open()) throw_errno("open /dev/null");
  Fd out_file = options.stdout_fd >= 0 ? Fd() : open_output_file(options.stdout_file);
  Fd err_file = options.stderr_fd >= 0 ? Fd() : open_output_file(options.stderr_file);

  std::vector<std::string> env = build_environment(options.extra_env);
  ExecPlan plan;
  plan.path = *path;
  plan.argv = null_terminated(argv);
  plan.envp = null_terminated(env);
  plan.stdio[0] = options.stdin_fd >= 0 ? options.stdin_fd : dev_null.get();
  plan.stdio[1] = options.stdout_fd >= 0 ? options.stdout_fd : out_file.get();
  plan.stdio[2] = options.stderr_fd >= 0 ? options.stderr_fd : err_file.get();
  plan.die_with_parent = options.die_with_parent;
  return ChildProcess(launch(plan, argv[0]));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), exit_code_(std::exchange(other.exit_code_, {})) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    exit_code_ = std::exchange(other.exit_code_, {});
  }
  return *this;
}

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::kill_and_reap() noexcept {
  if (pid_ <= 0 || exit_code_) return;
  // The unreaped child keeps its pid (and so its process group id) from being reused.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = exit_code_from(status);
}

void ChildProcess::record(int wait_status) { exit_code_ = exit_code_from(wait_status); }

bool ChildProcess::running() {
  if (pid_ <= 0 || exit_code_) return false;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return true;
  if (r == pid_) {
    record(status);
  } else {
    exit_code_ = -1;  // ECHILD: someone else reaped it
  }
  return false;
}

int ChildProcess::wait() {
  if (pid_ <= 0) throw std::logic_error("ChildProcess::wait on a moved-from object");
  if (exit_code_) return *exit_code_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    record(status);
  } else {
    exit_code_ = -1;
  }
  return *exit_code_;
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto nap = std::chrono::milliseconds(1);
  while (running()) {
    auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(nap, deadline - now));  // polling is fine in this test helper
    nap = std::min(nap * 2, std::chrono::milliseconds(20));
  }
  return exit_code_;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

void ChildProcess::signal_group(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(-pid_, sig);
}

RunResult run_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& extra_env, std::string_view stdin_text,
                      std::chrono::milliseconds timeout) {
  Pipe in = make_pipe();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  SpawnOptions options;
  options.extra_env = extra_env;
  options.stdin_fd = in.read_end.get();
  options.stdout_fd = out.write_end.get();
  options.stderr_fd = err.write_end.get();
  ChildProcess child = ChildProcess::spawn_with(argv, options);
  in.read_end.reset();
  out.write_end.reset();
  err.write_end.reset();
  set_nonblocking(in.write_end.get());
  set_nonblocking(out.read_end.get());
  set_nonblocking(err.read_end.get());

  RunResult result;
  std::string_view pending = stdin_text;
  if (pending.empty()) in.write_end.reset();
  const auto deadline = Clock::now() + timeout;
  std::optional<Clock::time_point> drain_deadline;  // set once the child has exited
  while (true) {
    pump(in.write_end, pending, out.read_end, result.stdout_text, err.read_end, result.stderr_text,
         std::chrono::milliseconds(10));
    auto now = Clock::now();
    if (!drain_deadline && exited_without_reaping(child.pid())) {
      drain_deadline = now + std::chrono::seconds(1);
    }
    bool outputs_closed = !out.read_end.is_open() && !err.read_end.is_open();
    if (drain_deadline && outputs_closed) break;
    if (drain_deadline && now >= *drain_deadline) {
      child.signal_group(SIGKILL);  // stragglers still hold the pipes: do not leak them
      break;
    }
    if (!drain_deadline && now >= deadline) {
      child.signal_group(SIGKILL);
      result.timed_out = true;
      break;
    }
  }
  result.exit_code = child.wait();
  return result;
}

std::uint16_t free_loopback_port() {
  Fd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.is_open()) throw_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw_errno("bind 127.0.0.1:0");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("getsockname");
  }
  return ntohs(addr.sin_port);
}

std::string make_temp_dir(std::string_view prefix) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  std::string path = fmt::format("{}/{}XXXXXX", base, prefix);
  if (::mkdtemp(path.data()) == nullptr) throw_errno(fmt::format("mkdtemp {}", path));
  return path;
}

void remove_tree(const std::string& path) noexcept {
  if (path.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

std::optional<std::string> find_executable(std::string_view program) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string_view::npos) {
    std::string path(program);
    return executable(path) ? std::optional(path) : std::nullopt;
  }
  const char* env_path = std::getenv("PATH");
  std::string_view dirs = env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    auto colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    std::string candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, program);
    if (executable(candidate)) return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    dirs.remove_prefix(colon + 1);
  }
}

std::string percent_encode(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string file_tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& line : tail) out += line + '\n';
  return out.empty() ? "(log empty or missing)\n" : out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit,
                std::chrono::milliseconds step) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(step)) {
    if (condition()) return true;
  }
  return condition();
}

}  // namespace fencelock::testing

#include "torture/child_processes.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "private_files.h"

namespace fencelock::torture {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How long one call of the server-control program may take.
constexpr std::chrono::seconds kControlTimeout{60};

// PROGRAM as given when it names a path, else its first match in PATH, looked up before fork().
std::string program_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const std::size_t colon = std::min(dirs.find(':'), dirs.size());
    std::string candidate = fmt::format("{}/{}", dirs.substr(0, colon), program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    dirs.remove_prefix(std::min(colon + 1, dirs.size()));
  }
  return program;
}

}  // namespace

WorkerProcess::WorkerProcess(int id, std::vector<std::string> argv, const std::string& backend,
                             const std::vector<std::string>& env)
    : id_(id), argv_(std::move(argv)) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    // The secrets pipe is this start's own: a variable of that name from the user is dropped.
    if (!entry.starts_with("FENCELOCK_BACKEND=") &&
        !entry.starts_with(std::string(kSecretsFdVariable) + "="))
      env_.emplace_back(*e);
  }
  env_.push_back("FENCELOCK_BACKEND=" + backend);
  env_.insert(env_.end(), env.begin(), env.end());
  start();
}

WorkerProcess::~WorkerProcess() { kill_and_reap(); }

void WorkerProcess::start(const std::vector<std::string>& extra_env) {
  std::vector<char*> raw, env;
  std::vector<std::string> extra = extra_env;
  for (auto& a : argv_) raw.push_back(a.data());
  raw.push_back(nullptr);
  for (auto& e : env_) {
    const std::string_view name = std::string_view(e).substr(0, e.find('=') + 1);
    bool replaced = false;
    for (auto& x : extra) replaced |= std::string_view(x).starts_with(name);
    if (!replaced) env.push_back(e.data());
  }
  for (auto& e : extra) {
    if (e.back() != '=') env.push_back(e.data());  // "NAME=" only removes NAME
  }
  // The secrets (the backend URI, the password variables) go through a pipe, not the
  // environment: until the new image makes itself non-dumpable, every process of the user can
  // read its /proc/PID/environ (an attack read the password there from workers starting up).
  std::string secrets;
  std::erase_if(env, [&](char* e) {
    if (!is_secret_variable(e)) return false;
    secrets.append(e).push_back('\0');
    return true;
  });
  int pipe_fds[2] = {-1, -1};
  if (!secrets.empty() && ::pipe2(pipe_fds, O_CLOEXEC) == 0) {
    const ssize_t n = ::write(pipe_fds[1], secrets.data(), secrets.size());  // < a pipe's buffer
    (void)n;
    ::close(pipe_fds[1]);
  }
  const std::string fd_variable = fmt::format("{}={}", kSecretsFdVariable, kSecretsFd);
  if (pipe_fds[0] >= 0) env.push_back(const_cast<char*>(fd_variable.c_str()));
  env.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (pipe_fds[0] >= 0) ::dup2(pipe_fds[0], kSecretsFd);  // dup2 clears close-on-exec
    ::execve("/proc/self/exe", raw.data(), env.data());
    ::_exit(127);
  }
  if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
}

bool is_secret_variable(std::string_view entry) {
  for (std::string_view name : {"FENCELOCK_BACKEND=", "FENCELOCK_REDIS_PASSWORD=",
                                "FENCELOCK_ETCD_PASSWORD=", "PGPASSWORD="}) {
    if (entry.starts_with(name)) return true;
  }
  return false;
}

void take_secrets_from_pipe() {
  const char* fd_text = std::getenv(kSecretsFdVariable);
  if (fd_text == nullptr) return;
  const int fd = std::atoi(fd_text);
  ::unsetenv(kSecretsFdVariable);  // NOLINT(concurrency-mt-unsafe): before any thread
  if (fd != kSecretsFd) return;
  std::string all;
  char buffer[4096];
  constexpr std::size_t kMaxSecrets = 65536;  // a URI and a few passwords
  while (all.size() < kMaxSecrets) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    all.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\0', at);
    const std::string entry = all.substr(at, end - at);
    if (const auto eq = entry.find('='); eq != std::string::npos && is_secret_variable(entry))
      // NOLINTNEXTLINE(concurrency-mt-unsafe): main() calls this before any thread starts
      ::setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
    if (end == std::string::npos) break;
    at = end + 1;
  }
}

void WorkerProcess::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

bool WorkerProcess::stopped() const {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid_));
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

bool WorkerProcess::wait_for(milliseconds limit) {
  for (auto until = Clock::now() + limit; pid_ > 0; std::this_thread::sleep_for(milliseconds(20))) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    if (Clock::now() >= until) return false;
  }
  return true;
}

bool WorkerProcess::kill_and_reap() {
  if (pid_ <= 0) return false;
  ::kill(pid_, SIGKILL);
  ::kill(pid_, SIGCONT);
  int status = 0;
  const bool reaped = ::waitpid(pid_, &status, 0) == pid_;
  pid_ = -1;
  return reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

ControlProgram::ControlProgram(const std::string& program, std::string log_path)
    : path_(program.empty() ? "" : program_path(program)), log_path_(std::move(log_path)) {}

bool ControlProgram::run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {path_};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  // Never through a link, only a regular file of this user's (private_files.h).
  int out = -1;
  if (std::FILE* log = cli::open_no_follow(log_path_, /*append=*/true); log != nullptr) {
    out = ::fcntl(::fileno(log), F_DUPFD_CLOEXEC, 0);
    std::fclose(log);
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (out >= 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
    }
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  if (out >= 0) ::close(out);
  // Bounded: a control program that hangs fails (SIGKILL after kControlTimeout).
  int status = 0;
  bool ran = false, timed_out = false;
  for (auto until = Clock::now() + kControlTimeout; pid > 0;) {
    const pid_t reaped = ::waitpid(pid, &status, WNOHANG);
    if (reaped == pid) {
      ran = true;
      break;
    }
    if (reaped < 0 && errno != EINTR) break;
    if (Clock::now() >= until) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  const bool ok = ran && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) {
    std::string words;
    for (const auto& a : argv) words += (words.empty() ? "" : " ") + a;
    failures_.push_back(
        timed_out
            ? fmt::format("'{}' did not finish within {} s", words,
                          std::chrono::duration_cast<std::chrono::seconds>(kControlTimeout).count())
        : !ran              ? fmt::format("'{}' could not be started", words)
        : WIFEXITED(status) ? fmt::format("'{}' exited {}", words, WEXITSTATUS(status))
                            : fmt::format("'{}' was killed by signal {}", words, WTERMSIG(status)));
  }
  return ok;
}

}  // namespace fencelock::torture

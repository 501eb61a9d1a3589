#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>

#include "exit_codes.h"

namespace fencelock::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Between fork() and exec() in a multi-threaded process only async-signal-safe calls are allowed:
// everything the child needs was prepared before fork().
[[noreturn]] void exec_in_child(char* const* argv, char* const* envp, const sigset_t& mask,
                                int error_pipe) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(error_pipe, &err, sizeof err);
  (void)ignored;
  _exit(kExitNotFound);
}

bool terminal_sent(const signalfd_siginfo& info) { return info.ssi_code == SI_KERNEL; }

void drain_eventfd(int fd) {
  std::uint64_t value = 0;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

int poll_timeout_ms(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

Spawned spawn_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& environment, const sigset_t& child_mask) {
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(environment);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {-1, errno};
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);

  pid_t pid = fork();
  if (pid < 0) return {-1, errno};
  if (pid == 0) exec_in_child(c_argv.data(), c_env.data(), child_mask, write_end.get());

  write_end.reset();
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(read_end.get(), &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof exec_errno)) return {pid, 0};  // EOF: exec succeeded
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return {-1, exec_errno};
}

std::chrono::milliseconds termination_lead(std::chrono::milliseconds kill_grace,
                                           std::chrono::milliseconds ttl) {
  return std::min(kill_grace, ttl / 2);
}

std::chrono::milliseconds kill_margin(std::chrono::milliseconds ttl) {
  return std::clamp(ttl / 20, std::chrono::milliseconds(1), std::chrono::milliseconds(25));
}

namespace {

// The termination state of one supervised command.
class Terminator {
 public:
  Terminator(pid_t pid, std::chrono::milliseconds grace, const LeaseDeadline& lease,
             const SupervisionHooks& hooks, ChildExit& result)
      : pid_(pid), grace_(grace), lease_(lease), hooks_(hooks), result_(result) {}

  // The next moment the loop must wake for, if any.
  std::optional<Clock::time_point> next_wake() const {
    if (result_.sent_sigkill) return std::nullopt;
    if (result_.sent_sigterm) return result_.kill_deadline;
    if (lease_.grace_outlives_lease || !lease_.valid_until) return std::nullopt;
    return lease_.valid_until() - termination_lead(grace_, lease_.ttl);
  }

  void lease_lost() {
    result_.lease_lost = true;
    if (!result_.sent_sigterm) {
      terminate();
      if (hooks_.on_lease_lost) hooks_.on_lease_lost();
    }
  }

  // Called on every wake: the short-lease SIGTERM and the SIGKILL when their time has come.
  void on_time(Clock::time_point now) {
    if (result_.sent_sigkill) return;
    if (!result_.sent_sigterm && !lease_.grace_outlives_lease && lease_.valid_until) {
      const Clock::time_point valid_until = lease_.valid_until();
      if (now >= valid_until - termination_lead(grace_, lease_.ttl)) {
        result_.lease_at_risk = true;
        terminate();
        if (hooks_.on_lease_at_risk)
          hooks_.on_lease_at_risk(std::chrono::floor<std::chrono::milliseconds>(valid_until - now));
      }
    }
    if (result_.sent_sigterm && result_.kill_deadline && now >= *result_.kill_deadline) {
      kill(kill_for_validity_);
    }
  }

  // poll() failed: do not leave the command running unsupervised.
  void kill_now() { kill(false); }

 private:
  void terminate() {
    ::kill(pid_, SIGTERM);
    result_.sent_sigterm = true;
    const Clock::time_point after_grace = Clock::now() + grace_;
    result_.kill_deadline = after_grace;
    if (!lease_.grace_outlives_lease && lease_.valid_until) {
      const Clock::time_point valid_until = lease_.valid_until();
      result_.valid_until_at_kill = valid_until;
      const Clock::time_point at_validity = valid_until - kill_margin(lease_.ttl);
      kill_for_validity_ = at_validity < after_grace;
      result_.kill_deadline = std::min(after_grace, at_validity);
    }
  }

  void kill(bool at_validity) {
    ::kill(pid_, SIGKILL);
    result_.sent_sigkill = true;
    if (hooks_.on_kill) hooks_.on_kill(at_validity);
  }

  pid_t pid_;
  std::chrono::milliseconds grace_;
  const LeaseDeadline& lease_;
  const SupervisionHooks& hooks_;
  ChildExit& result_;
  bool kill_for_validity_ = false;  // SIGKILL is due at the validity, before the grace ends
};

}  // namespace

ChildExit supervise_command(pid_t pid, SignalChannel& signals, int lost_fd,
                            std::chrono::milliseconds kill_grace, const LeaseDeadline& lease,
                            const SupervisionHooks& hooks) {
  ChildExit result;
  Terminator terminator(pid, kill_grace, lease, hooks, result);
  for (;;) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {lost_fd, POLLIN, 0}};
    // Lease loss is acted on once; after that only the command's exit matters.
    nfds_t count = result.lease_lost ? 1 : 2;
    int ready = ::poll(fds, count, poll_timeout_ms(terminator.next_wake()));
    if (ready < 0 && errno != EINTR) terminator.kill_now();
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      for (const signalfd_siginfo& info : signals.drain()) {
        int signo = static_cast<int>(info.ssi_signo);
        if (signo != SIGCHLD && !terminal_sent(info)) ::kill(pid, signo);
      }
    }
    int status = 0;
    pid_t reaped = waitpid(pid, &status, WNOHANG);
    if (reaped == pid) {
      result.wait_status = status;
      return result;
    }
    if (ready > 0 && count == 2 && (fds[1].revents & POLLIN)) {
      drain_eventfd(lost_fd);
      terminator.lease_lost();
    }
    terminator.on_time(Clock::now());
  }
}

int shell_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  return kExitSoftware;
}

}  // namespace fencelock::cli

#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>

#include "core/saturate.h"
#include "exit_codes.h"
#include "process_tree.h"

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
                                int error_pipe, pid_t parent, int terminal_fd, int guardian_fd) {
  // A process group of its own, so that every signal can go to the whole job (the parent sets it
  // too: whichever runs first). SIGKILL if the forking thread (fencelock's main thread, which
  // lives as long as fencelock) dies; a parent that died before this line is caught by getppid().
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(kExitSoftware);
  // The guardian guards this process group before the command runs (SIGPIPE is still ignored
  // here, as in fencelock: a guardian that is gone makes the write fail, not this process die).
  if (guardian_fd >= 0) Guardian::arm_in_child(guardian_fd);
  if (terminal_fd >= 0) {
    // The terminal's foreground goes to the command's group; a background group may only take
    // it with SIGTTOU blocked.
    sigset_t ttou;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, nullptr);
    ::tcsetpgrp(terminal_fd, ::getpid());
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(error_pipe, &err, sizeof err);
  (void)ignored;
  _exit(kExitNotFound);
}

void drain_eventfd(int fd) {
  std::uint64_t value = 0;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

// tcsetpgrp() from a process outside the foreground group, with SIGTTOU blocked (as it must be).
void give_terminal(int terminal_fd, pid_t pgid) {
  sigset_t ttou;
  sigset_t old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &ttou, &old);
  ::tcsetpgrp(terminal_fd, pgid);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// The command stopped (Ctrl-Z): take the terminal back and stop fencelock too, so that the shell
// sees its job stopped; once continued, give the terminal back if fencelock is in the foreground
// again and continue the command's group.
void stop_with_command(pid_t pgid, int terminal_fd) {
  give_terminal(terminal_fd, ::getpgrp());
  ::kill(::getpid(), SIGSTOP);
  if (::tcgetpgrp(terminal_fd) == ::getpgrp()) give_terminal(terminal_fd, pgid);
  ::kill(-pgid, SIGCONT);
}

int poll_timeout_ms(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT32_MAX));
}

}  // namespace

Spawned spawn_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& environment, const sigset_t& child_mask,
                      int terminal_fd, int guardian_fd) {
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(environment);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {-1, errno};
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);

  const pid_t parent = ::getpid();
  pid_t pid = fork();
  if (pid < 0) return {-1, errno};
  if (pid == 0) {
    exec_in_child(c_argv.data(), c_env.data(), child_mask, write_end.get(), parent, terminal_fd,
                  guardian_fd);
  }
  ::setpgid(pid, pid);  // EACCES once the child has exec'd: it did so itself
  if (terminal_fd >= 0) give_terminal(terminal_fd, pid);

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

GuardianDeadlines guardian_deadlines(Clock::time_point valid_until,
                                     std::chrono::milliseconds kill_grace,
                                     const LeaseDeadline& lease) {
  if (lease.grace_outlives_lease) {
    return {valid_until, detail::deadline_after(valid_until, kill_grace)};
  }
  const auto margin = std::chrono::duration_cast<std::chrono::microseconds>(kill_margin(lease.ttl));
  return {Guardian::kNever, valid_until - margin / 2};
}

Clock::time_point next_publication(Clock::time_point now, Clock::time_point published,
                                   std::chrono::milliseconds ttl) {
  const Clock::time_point first = published - ttl / 3;
  if (now < first) return first;
  if (now >= published) return Clock::time_point::max();
  return now + std::max<Clock::duration>((published - now) / 2, std::chrono::milliseconds(1));
}

namespace {

// After SIGKILL, how often the tree is looked at again (a process forking as SIGKILL arrived may
// leave a child that the first round did not see).
constexpr std::chrono::milliseconds kRekill{20};

// The termination state of one supervised command and the processes it started.
class Terminator {
 public:
  Terminator(const ProcessTree& tree, std::chrono::milliseconds grace, const LeaseDeadline& lease,
             const SupervisionHooks& hooks, Guardian* guardian, ChildExit& result)
      : tree_(tree),
        grace_(grace),
        lease_(lease),
        hooks_(hooks),
        guardian_(guardian != nullptr && guardian->active() ? guardian : nullptr),
        result_(result) {
    publish(Clock::now());
  }

  // The next moment the loop must wake for, if any.
  std::optional<Clock::time_point> next_wake() const {
    if (result_.sent_sigkill) return Clock::now() + kRekill;
    if (result_.sent_sigterm) return result_.kill_deadline;
    std::optional<Clock::time_point> wake;
    if (publishing()) wake = next_publication_;
    if (lease_.grace_outlives_lease || !lease_.valid_until) return wake;
    const Clock::time_point at_risk = lease_.valid_until() - termination_lead(grace_, lease_.ttl);
    return wake ? std::min(*wake, at_risk) : at_risk;
  }

  // The guardian exited while the command ran: without it nothing guards the command while
  // fencelock is not scheduled, so it is ended as after a loss.
  void guardian_lost() {
    result_.guardian_lost = true;
    guardian_ = nullptr;
    if (!result_.sent_sigterm) {
      terminate();
      if (hooks_.on_guardian_lost) hooks_.on_guardian_lost();
    }
  }

  void lease_lost() {
    result_.lease_lost = true;
    if (!result_.sent_sigterm) {
      terminate();
      if (hooks_.on_lease_lost) hooks_.on_lease_lost();
    }
  }

  // The command exited and `count` processes it started still run: they get the same ending as
  // the command would (SIGTERM, then SIGKILL after the grace or at the lease's validity).
  void leftovers(int count) {
    result_.leftovers = std::max(result_.leftovers, count);
    if (!result_.sent_sigterm) {
      terminate();
      if (hooks_.on_leftovers) hooks_.on_leftovers(count);
    }
  }

  // Called on every wake: the short-lease SIGTERM and the SIGKILL when their time has come.
  void on_time(Clock::time_point now) {
    publish(now);
    if (result_.sent_sigkill) {
      tree_.signal(SIGKILL);
      return;
    }
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
  void kill_now() {
    if (!result_.sent_sigkill) kill(false);
  }

  // What the guardian did, for the result.
  void record_guardian(const Guardian* guardian) const {
    if (guardian == nullptr) return;
    result_.guardian_killed = guardian->killed_at_deadline();
    result_.guardian_sigterm = guardian->sent_sigterm();
  }

 private:
  // The guardian follows the lease until the supervisor sends SIGTERM itself.
  bool publishing() const {
    return guardian_ != nullptr && lease_.valid_until && !result_.sent_sigterm;
  }

  // Tells the guardian the lease's deadline if a renewal moved it.
  void publish(Clock::time_point now) {
    if (!publishing()) return;
    const Clock::time_point valid_until = lease_.valid_until();
    if (!published_ || valid_until > *published_) {
      const GuardianDeadlines deadlines = guardian_deadlines(valid_until, grace_, lease_);
      guardian_->set_deadlines(deadlines.term_at, deadlines.kill_at);
      published_ = valid_until;
    }
    next_publication_ = next_publication(now, *published_, lease_.ttl);
  }

  void terminate() {
    // SIGTERM once: not if the guardian sent it while fencelock was not scheduled.
    if (guardian_ == nullptr || guardian_->claim_termination()) tree_.signal_and_continue(SIGTERM);
    result_.sent_sigterm = true;
    const Clock::time_point after_grace = detail::deadline_after(Clock::now(), grace_);
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
    tree_.signal(SIGKILL);
    result_.sent_sigkill = true;
    if (hooks_.on_kill) hooks_.on_kill(at_validity);
  }

  const ProcessTree& tree_;
  std::chrono::milliseconds grace_;
  const LeaseDeadline& lease_;
  const SupervisionHooks& hooks_;
  Guardian* guardian_;  // null when there is none, or once it exited
  ChildExit& result_;
  bool kill_for_validity_ = false;  // SIGKILL is due at the validity, before the grace ends
  std::optional<Clock::time_point> published_;  // the valid_until() the guardian was last given
  Clock::time_point next_publication_ = Clock::time_point::max();
};

}  // namespace

ChildExit supervise_command(pid_t pid, SignalChannel& signals, int lost_fd,
                            std::chrono::milliseconds kill_grace, const LeaseDeadline& lease,
                            const SupervisionHooks& hooks, Guardian* guardian, int terminal_fd) {
  ChildExit result;
  const ProcessTree tree(pid);
  Terminator terminator(tree, kill_grace, lease, hooks, guardian, result);
  int guardian_fd = guardian != nullptr && guardian->active() ? guardian->exit_fd() : -1;
  bool command_exited = false;
  for (;;) {
    // Lease loss and the guardian's exit are acted on once (poll() skips a negative fd); after
    // that only the tree's exit matters.
    pollfd fds[3] = {{signals.fd(), POLLIN, 0},
                     {result.lease_lost ? -1 : lost_fd, POLLIN, 0},
                     {guardian_fd, POLLIN, 0}};
    int ready = ::poll(fds, 3, poll_timeout_ms(terminator.next_wake()));
    if (ready < 0 && errno != EINTR) terminator.kill_now();
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      // The command's group is not the terminal's foreground group unless fencelock handed the
      // terminal over, and then the terminal's signals reach only the command: whatever arrives
      // here did not reach the command yet. SIGCONT after it: a stopped command handles it too.
      for (const signalfd_siginfo& info : signals.drain()) {
        int signo = static_cast<int>(info.ssi_signo);
        if (signo == SIGCHLD) continue;
        ::kill(-pid, signo);
        ::kill(-pid, SIGCONT);
      }
    }
    int status = 0;
    bool stopped = false;
    const bool root_seen = reap_children(pid, !command_exited && terminal_fd >= 0, status, stopped);
    if (root_seen && stopped) {
      stop_with_command(pid, terminal_fd);
    } else if (root_seen && !command_exited) {
      command_exited = true;
      result.wait_status = status;
      if (terminal_fd >= 0) give_terminal(terminal_fd, ::getpgrp());
    }
    if (command_exited) {
      const std::vector<pid_t> left = tree.members_settled();
      if (left.empty()) {
        terminator.record_guardian(guardian);
        return result;
      }
      terminator.leftovers(static_cast<int>(left.size()));
    }
    if (ready > 0 && fds[1].fd >= 0 && (fds[1].revents & POLLIN)) {
      drain_eventfd(lost_fd);
      terminator.lease_lost();
    }
    if (ready > 0 && fds[2].fd >= 0 && fds[2].revents != 0) {
      guardian_fd = -1;
      terminator.guardian_lost();
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

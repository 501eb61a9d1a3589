// Starting the command of `fencelock run` and watching it until it exits.
//
// The command stays in fencelock's process group and session (so it can use the terminal like any
// foreground program). fencelock forwards the signals in kForwardedSignals to it explicitly, except
// those the terminal sent (si_code SI_KERNEL): the terminal already delivered them to the whole
// foreground process group, the command included. Only the command's own pid is signalled; a
// command that starts children of its own must pass signals on (e.g. `sh -c 'exec prog'`).
//
// The loop sleeps in poll() on two descriptors and never polls on a timer: the signalfd (the
// command's SIGCHLD and signals to forward) and the lease-lost eventfd. It wakes on a timer only
// to send SIGKILL once the kill grace after a lost lease has run out.
//
// Thread-safety: call from the thread that opened the SignalChannel.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "signals.h"

namespace fencelock::cli {

struct Spawned {
  pid_t pid = -1;      // the running command; -1 when it could not be started
  int exec_errno = 0;  // why it could not be started (fork or exec failed); 0 when it runs
};

// Runs argv (argv[0] looked up in PATH) with exactly `environment` ("NAME=VALUE" entries), the
// signal mask `child_mask` and default dispositions for SIGPIPE. Reports a failed exec through a
// close-on-exec pipe and reaps the child in that case, so the caller sees it as exec_errno.
// REQUIRES: !argv.empty().
Spawned spawn_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& environment, const sigset_t& child_mask);

struct SupervisionHooks {
  // The lease was lost and SIGTERM was just sent to the command.
  std::function<void()> on_lease_lost;
  // The command outlived the kill grace and SIGKILL was just sent.
  std::function<void()> on_kill;
};

struct ChildExit {
  int wait_status = 0;      // as from waitpid()
  bool lease_lost = false;  // the lost eventfd fired while the command ran
  bool sent_sigkill = false;
};

// Waits until `pid` exits, forwarding signals from `signals`. When `lost_fd` (an eventfd) becomes
// readable, sends SIGTERM to the command, and SIGKILL if it still runs `kill_grace` later.
ChildExit supervise_command(pid_t pid, SignalChannel& signals, int lost_fd,
                            std::chrono::milliseconds kill_grace, const SupervisionHooks& hooks);

// A shell's $? for a wait status: the exit code, or 128 + N for a command killed by signal N.
int shell_exit_code(int wait_status);

}  // namespace fencelock::cli

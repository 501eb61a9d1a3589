// Starting the command of `fencelock run` and watching it until it exits.
//
// The command runs in a process group of its own, and every signal fencelock sends goes to all of
// the command's processes (ProcessTree, process_tree.h): those it forwards (kForwardedSignals) to
// the group, SIGTERM and SIGKILL to the group and every descendant. Every signal but SIGKILL is
// followed by SIGCONT, so that a command that stopped itself (kill -STOP $$) wakes to handle it.
// When fencelock is in the foreground of its terminal it hands the terminal's foreground to the
// command's group (so that CMD can read the terminal, and Ctrl-C and Ctrl-Z reach CMD's whole job
// directly), takes it back when the command exits, and stops itself while the command is stopped,
// so that the shell's job control works as for any foreground program. When the command exits,
// processes it left behind get the same ending as a command after a loss (SIGTERM, SIGKILL after
// the grace or at the lease's validity), and supervise_command() returns only once none is left:
// the lock is held until the last of them is gone.
//
// The loop sleeps in poll() on three descriptors: the signalfd (the command's SIGCHLD and signals
// to forward), the lease-lost eventfd and the guardian's exit pipe. Its only timers follow the
// lease's deadline: it wakes when the lease would be left with less than the termination lead
// (see LeaseDeadline), to tell the guardian a deadline a renewal moved (see below), to send
// SIGKILL, and after SIGKILL every 20 ms until the tree is gone (a process that forked as SIGKILL
// arrived may have left a child the first round missed).
//
// The guardian (guardian.h) is the dead man's switch for a supervisor that is not scheduled
// (stopped, frozen): it kills the tree at guardian_deadlines() of the last valid_until() it was
// told. The supervisor tells it at start and then looks for a renewal a third of the TTL before
// the deadline it gave, again at halving intervals while none came (next_publication()), until
// it sends SIGTERM itself; from then on the deadlines stay. A guardian that exits while the
// command runs is a guard lost: the command gets SIGTERM as after a loss (fail safe).
//
// The command never runs past valid_until() unless asked: after a loss, SIGKILL comes at
// min(SIGTERM + kill_grace, valid_until - a small margin). So that a command that handles SIGTERM
// still gets its grace when renewals fail, SIGTERM is also sent, before lost() fires, once
// renewals have left the lease with less than min(kill_grace, ttl/2) of validity (normally a
// renewal at ttl/3 keeps at least 2/3 ttl ahead). With grace_outlives_lease the old rule holds:
// SIGTERM on loss, SIGKILL kill_grace later, whatever the validity (safe only for a command whose
// writes are fenced with its token).
//
// Thread-safety: call from the thread that opened the SignalChannel.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "guardian.h"
#include "signals.h"

namespace fencelock::cli {

struct Spawned {
  pid_t pid = -1;      // the running command; -1 when it could not be started
  int exec_errno = 0;  // why it could not be started (fork or exec failed); 0 when it runs
};

// Runs argv (argv[0] looked up in PATH) with exactly `environment` ("NAME=VALUE" entries), the
// signal mask `child_mask` and default dispositions for SIGPIPE, in a new process group (pgid =
// its pid) that gets the foreground of `terminal_fd` unless that is -1, with PR_SET_PDEATHSIG =
// SIGKILL (tied to the calling thread: call from a thread that lives as long as the command).
// Reports a failed exec through a close-on-exec pipe and reaps the child in that case, so the
// caller sees it as exec_errno. With `guardian_fd` (Guardian::arming_fd()) the child arms the
// guardian itself before exec (Guardian::arm_in_child). REQUIRES: !argv.empty().
Spawned spawn_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& environment, const sigset_t& child_mask,
                      int terminal_fd = -1, int guardian_fd = -1);

struct SupervisionHooks {
  // The lease was lost and SIGTERM was just sent to the command.
  std::function<void()> on_lease_lost;
  // Renewals left the lease with less than the termination lead; SIGTERM was just sent.
  // The argument is the validity left.
  std::function<void(std::chrono::milliseconds)> on_lease_at_risk;
  // SIGKILL was just sent: the kill grace ran out, or (true) the lease's validity did.
  std::function<void(bool at_validity)> on_kill;
  // The command exited leaving `count` processes running; SIGTERM was just sent to them.
  std::function<void(int count)> on_leftovers;
  // The guardian exited while the command ran; SIGTERM was just sent to the command.
  std::function<void()> on_guardian_lost;
};

// What the supervisor knows of the lease: its current deadline (renewals move it forward), its
// TTL, and whether the user let the kill grace outlive the lease.
struct LeaseDeadline {
  std::function<std::chrono::steady_clock::time_point()> valid_until;
  std::chrono::milliseconds ttl{0};
  bool grace_outlives_lease = false;
};

struct ChildExit {
  int wait_status = 0;         // as from waitpid()
  bool lease_lost = false;     // the lost eventfd fired while the command ran
  bool lease_at_risk = false;  // SIGTERM was sent before lost() because renewals were failing
  bool sent_sigterm = false;
  bool sent_sigkill = false;
  int leftovers = 0;  // processes still running when the command exited (ended by fencelock)
  bool guardian_lost = false;     // the guardian exited while the command ran (SIGTERM followed)
  bool guardian_killed = false;   // the guardian sent SIGKILL at its deadline
  bool guardian_sigterm = false;  // the guardian sent SIGTERM at its deadline
  // When SIGKILL was scheduled for, and the lease's valid_until() when it was scheduled.
  std::optional<std::chrono::steady_clock::time_point> kill_deadline;
  std::optional<std::chrono::steady_clock::time_point> valid_until_at_kill;
};

// SIGTERM's lead on valid_until() while renewals fail: min(kill_grace, ttl / 2).
std::chrono::milliseconds termination_lead(std::chrono::milliseconds kill_grace,
                                           std::chrono::milliseconds ttl);
// How long before valid_until() SIGKILL is sent (poll() wakes late, never early):
// ttl / 20 clamped to 1..25 ms.
std::chrono::milliseconds kill_margin(std::chrono::milliseconds ttl);

// The deadlines the guardian acts on for a lease valid until `valid_until`: by default none for
// SIGTERM and SIGKILL at valid_until less half the kill margin (after the supervisor's own
// SIGKILL, which keeps the first word); with grace_outlives_lease SIGTERM at valid_until and
// SIGKILL kill_grace later.
struct GuardianDeadlines {
  std::chrono::steady_clock::time_point term_at;
  std::chrono::steady_clock::time_point kill_at;
};
GuardianDeadlines guardian_deadlines(std::chrono::steady_clock::time_point valid_until,
                                     std::chrono::milliseconds kill_grace,
                                     const LeaseDeadline& lease);

// When the supervisor next looks for a renewal to tell the guardian of, the guardian having been
// given `published`: ttl/3 before it, then halfway to it each time (1 ms at least); never once
// it has passed.
std::chrono::steady_clock::time_point next_publication(
    std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point published,
    std::chrono::milliseconds ttl);

// Waits until `pid` and every process it started have exited, forwarding signals from `signals`.
// Terminates them when `lost_fd` (an eventfd) becomes readable, the lease runs short, or the
// guardian exits, as described above. `guardian`: the armed guardian of the command, or null.
// `terminal_fd`: the terminal spawn_command() handed to the command, or -1. Reaps every child of
// this process.
ChildExit supervise_command(pid_t pid, SignalChannel& signals, int lost_fd,
                            std::chrono::milliseconds kill_grace, const LeaseDeadline& lease,
                            const SupervisionHooks& hooks, Guardian* guardian = nullptr,
                            int terminal_fd = -1);

// A shell's $? for a wait status: the exit code, or 128 + N for a command killed by signal N.
int shell_exit_code(int wait_status);

}  // namespace fencelock::cli

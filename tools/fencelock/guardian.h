// The guardian of `fencelock run`: a dead man's switch, in a process of its own, that ends CMD's
// whole tree at the lease's deadline unless fencelock moved the deadline since, and at once when
// fencelock dies.
//
// Why a process apart: the supervisor (supervisor.h) guards CMD only while fencelock is
// scheduled. A stopped fencelock (kill -STOP of its pid, a SIGSTOP or SIGTSTP to its process
// group, a debugger) renews nothing and ends nothing, and CMD ran on past valid_until() beside
// the next holder. The guardian does not depend on fencelock running:
// - It is forked before any thread and before fencelock becomes a child subreaper, twice (the
//   middle process exits at once), so it is re-parented to init (or to an outer subreaper): never
//   fencelock's child, never a member of CMD's tree. It calls setsid(), so no signal to
//   fencelock's process group or terminal (Ctrl-Z, Ctrl-C, kill -STOP -PGID) reaches it, and it
//   ignores every catchable signal that could end or stop it (SIGSTOP and SIGKILL cannot be
//   ignored: those sent to its own pid escape, see docs/CLI.md). It asks for the real-time
//   scheduling class (or a lower nice value), so that a saturated CPU does not make it late.
// - The deadlines live in a shared anonymous mapping (MAP_SHARED, made before the fork) as
//   steady_clock nanoseconds: one clock for both processes, since both run this program
//   (CLOCK_MONOTONIC on Linux). fencelock stores them (set_deadlines) whenever a renewal moved
//   valid_until(); the guardian sleeps until the earliest and reads them again when it wakes, so
//   a renewal it was not told of (fencelock frozen) does not delay it.
// - CMD's own process arms the guardian before exec (arm_in_child), so that CMD never runs
//   unguarded, not even when fencelock is stopped right after fork().
// - At term_at (only --grace-outlives-lease sets one) it sends SIGTERM and then SIGCONT to CMD's
//   tree unless fencelock already sent SIGTERM (claim_termination); at kill_at, SIGKILL to the
//   tree, each process as soon as a scan reads it, scanning again until the tree stands still
//   (ProcessTree::signal_settled: work that keeps moving to new pids cannot outrun it), and
//   again every 20 ms until none of it is left. The tree is found as fencelock finds it
//   (ProcessTree with fencelock as the owner), so orphans re-parented to a stopped fencelock are
//   reached too.
// - When fencelock dies the kernel closes the control pipe whose only writer it was: the
//   guardian stops the tree (SIGSTOP on sight until it stands still, so that no process is
//   re-parented out of it), kills it and exits. When the run ends fencelock stands it down and it
//   exits without killing anything. It never outlives fencelock by more than a kill.
// - When the guardian dies, the kernel closes the exit pipe whose only writer it was, and
//   exit_fd() becomes readable: the supervisor stops CMD (fail safe).
//
// Thread-safety: start() must run before the process starts threads; the other members from one
// thread, except that set_deadlines() and claim_termination() only touch atomics.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>

#include "unique_fd.h"

namespace fencelock::cli {

class Guardian {
 public:
  using Clock = std::chrono::steady_clock;
  // "No deadline": the guardian waits only for fencelock's end.
  static constexpr Clock::time_point kNever = Clock::time_point::max();

  Guardian() = default;
  Guardian(Guardian&&) noexcept = default;
  Guardian& operator=(Guardian&&) noexcept = default;
  ~Guardian();

  // Forks the guardian and waits until it is in its own session. Inactive (every member does
  // nothing) if it could not start; errno says why.
  // REQUIRES: no other thread of this process has been started yet, and the process is not a
  // child subreaper yet (else the guardian would be re-parented to it).
  static Guardian start();

  bool active() const { return control_.valid(); }
  // The guardian's pid; -1 when inactive.
  pid_t pid() const;
  // Readable (end of file) once the guardian has exited; -1 when inactive.
  int exit_fd() const { return exit_.get(); }

  // The deadlines the guardian acts on (kNever: none). Call before arm(), and again whenever
  // they move; they only move forward.
  void set_deadlines(Clock::time_point term_at, Clock::time_point kill_at);
  // From now on the guardian guards the tree of CMD, whose process group is `pgid`.
  void arm(pid_t pgid);
  // The descriptor a child writes to with arm_in_child(); -1 when inactive. Close-on-exec.
  int arming_fd() const { return control_.get(); }
  // Arms the guardian from CMD's own process, after setpgid(0, 0) and before exec, so that CMD
  // never runs unguarded (as it could between fork() and an arm() from a parent that is stopped
  // at that moment). Async-signal-safe; a failure (the guardian is gone) is left to the
  // supervisor, which sees the guardian's exit.
  static void arm_in_child(int arming_fd);
  // True if the caller may send SIGTERM to the tree: the guardian has not, and will not.
  bool claim_termination();
  // What the guardian did: sent SIGTERM at term_at; sent SIGKILL at kill_at.
  bool sent_sigterm() const;
  bool killed_at_deadline() const;
  // The tree is gone: the guardian exits without killing anything more. Returns once it has
  // exited (end of file on exit_fd()), or after 2 s: it may be in a kill round, and until it
  // exits it signals every child of this process.
  void stand_down();

  // The deadlines and flags both processes see (guardian.cpp).
  struct Shared;

 private:
  struct Unmap {
    void operator()(Shared* shared) const;
  };
  UniqueFd control_;  // fencelock's end of the control pipe (the guardian reads)
  UniqueFd exit_;     // fencelock's end of the exit pipe (the guardian holds the writer)
  std::unique_ptr<Shared, Unmap> shared_;
};

}  // namespace fencelock::cli

// The processes of the command under `fencelock run`, and what ends them.
//
// `fencelock run` starts CMD in a process group of its own (pgid = CMD's pid) and, as a child
// subreaper (PR_SET_CHILD_SUBREAPER), inherits every descendant whose parent exits. ProcessTree
// names the processes that belong to CMD: the members of CMD's process group, CMD's descendants,
// and the descendants of the tree's owner, fencelock (a subreaper's children are CMD or orphans
// of CMD's tree). Signals to the tree go to all of them, so `sh -c 'worker & wait'`, a pipeline and
// even a `setsid` grandchild are reached while fencelock lives. The guardian (guardian.h), a
// process apart, finds the same tree with fencelock as the owner.
//
// When fencelock dies, the guardian kills the tree, and CMD itself has PR_SET_PDEATHSIG = SIGKILL
// (spawn_command, supervisor.h). What escapes then: a descendant that left CMD's process group
// (setsid, setpgid) and whose parent is gone (the guardian kills CMD's group and what still
// descends from CMD). A PID namespace (--pid-namespace) closes that gap: see PidNamespace below.
//
// Thread-safety: ProcessTree's functions are thread-compatible (they read /proc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace fencelock::cli {

class ProcessTree {
 public:
  // The tree of `root` owned by this process.
  explicit ProcessTree(pid_t root);
  // The tree of `root` owned by `owner` (-1: none, when fencelock is gone).
  ProcessTree(pid_t root, pid_t owner) : root_(root), owner_(owner) {}

  pid_t root() const { return root_; }

  // The members that have not exited (zombies left out), found in /proc. A process is a member
  // if it is in the root's process group, or descends from the root or from the owner (the
  // owner's children are CMD and the orphans of CMD's tree it inherited as a subreaper; their
  // children, even those in sessions of their own whose parent still lives, belong to CMD too);
  // neither the owner nor the calling process is one.
  std::vector<pid_t> members() const;
  // The same, and `zombies` receives the zombie members, sorted. A scan still running when the
  // steady clock passes `stop_by` ends there, with what it found so far.
  std::vector<pid_t> members(std::vector<pid_t>& zombies,
                             std::chrono::steady_clock::time_point stop_by =
                                 std::chrono::steady_clock::time_point::max()) const;

  // The members found alive, scanning again until the answer can be trusted: one scan of /proc
  // is not a snapshot, and a process that forks and exits while it runs (a daemon's double fork,
  // a command whose work keeps moving to new pids) can hide its child: the child was created
  // after the scan passed its pid (a recycled lower one), and the parent is a zombie by the time
  // its stat is read. So an empty answer needs a scan with no living member and no zombie member
  // that the scan before it did not show (at least two scans): a process that exits leaves a
  // zombie until its parent or the subreaper reaps it, and any child it forked was re-parented
  // before that, so exists for the whole of the next scan and is found by it. Scans at most
  // kMaxScans times (each new zombie needs a living member between two scans).
  std::vector<pid_t> members_settled() const;

  // Sends `signo` to the root's process group and to every member, each as soon as the scan
  // reads it (a process that forks and exits between being read and being signalled would hide
  // its child from the scan). Returns how many members (outside the group's own delivery) were
  // found.
  int signal(int signo) const;
  // Sends `signo` and then SIGCONT to the group and to every member, so that a stopped process
  // wakes to handle the signal (for every signal but SIGKILL, which needs no SIGCONT).
  int signal_and_continue(int signo) const;

  // signal(signo), scanning again until a scan finds no living member that an earlier scan had
  // not signalled and no zombie member that the scan before it did not show; for SIGKILL or
  // SIGSTOP, which no process can block. Stops a tree whose work keeps moving to new pids: a
  // process with SIGKILL or SIGSTOP pending cannot fork any more (the kernel fails or restarts
  // the fork), so a process created during the last scan has an ancestor that existed when it
  // began and was read by it, living (signalled before, so it could not fork) or as a zombie
  // (already one the scan before, so it could not fork either). That holds while nothing reaps
  // the tree's zombies, as when fencelock is stopped (the guardian's case); while fencelock
  // runs, it guards the tree itself. Each scan takes the zombies of the scan before it (the first,
  // `known_zombies`: sorted zombie members from an earlier members() call) as still zombies
  // without reading them again: a zombie stays one until it is reaped, and its pid is not reused
  // before that. A command that left thousands of zombies under a stopped fencelock made each
  // scan take over 10 ms, and the first SIGKILL came that much after the deadline. Returns the
  // living members the last scan found (a process in uninterruptible sleep dies only when it
  // leaves it; a stopped one stays).
  std::vector<pid_t> signal_settled(int signo, std::vector<pid_t> known_zombies = {}) const;

  // SIGKILL to every child of the owner as /proc/OWNER/task/*/children lists them (no scan of
  // /proc: a few reads however many processes the machine runs), then again while a pass lists a
  // child it had not killed, for at most kChildPassesFor after the first. The children of
  // fencelock, a subreaper, are CMD and the orphans of its tree, where work that keeps moving to
  // new pids always is: its generations reach the owner as their parents exit. A child of a
  // stopped owner is not reaped, so its pid is not reused in between. A child forked by a listed
  // process before it died reaches the list only then: where a pass takes longer than a
  // generation lives (a sanitizer build), unbounded passes chased such work for 2.7 s, and even
  // 5 ms of them made the guardian test fail 1 run in 5 there; signal_settled() finishes the job.
  // Returns how many were signalled (0 without an owner, or where the kernel has no children
  // files: CONFIG_PROC_CHILDREN).
  int kill_children_of_owner() const;

  // How long kill_children_of_owner() repeats its passes after the first (0: one pass).
  static constexpr std::chrono::milliseconds kChildPassesFor{0};

  // The most scans members_settled() and signal_settled() make.
  static constexpr int kMaxScans = 1000;

 private:
  // One scan: the living members, each sent `on_sight` (0: nothing) as soon as it is read and
  // known to be a member; `zombies` receives the zombie members, sorted. A pid listed in
  // `known_zombies` (sorted) is taken as a zombie member without reading it.
  std::vector<pid_t> census(std::vector<pid_t>& zombies, int on_sight,
                            const std::vector<pid_t>& known_zombies,
                            std::chrono::steady_clock::time_point stop_by =
                                std::chrono::steady_clock::time_point::max()) const;

  pid_t root_;
  pid_t owner_;
};

// Reaps every exited child of this process without blocking. `root_status` receives the wait
// status of `root` if it was reaped (stops of `root` are reported too when `report_stops`).
// Returns true if `root` was reaped or reported stopped; `stopped` tells which.
bool reap_children(pid_t root, bool report_stops, int& root_status, bool& stopped);

// Makes this process a child subreaper. Returns "" or what failed.
std::string become_subreaper();

// --pid-namespace: CMD runs as init of a new PID namespace (through util-linux's `unshare
// --pid --fork --kill-child`, with a user namespace when not root). When the namespace's init
// exits or is killed, the kernel kills every process in the namespace, setsid or not; and
// `unshare` dies with fencelock (PR_SET_PDEATHSIG), taking the namespace with it.
namespace pid_namespace {
// "" if this process may create the namespaces; otherwise why not, and what to do.
std::string refusal();
// `command` prefixed with the unshare invocation.
std::vector<std::string> wrap(const std::vector<std::string>& command);
}  // namespace pid_namespace

}  // namespace fencelock::cli

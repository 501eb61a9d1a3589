// The processes of the command under `fencelock run`, and what ends them.
//
// `fencelock run` starts CMD in a process group of its own (pgid = CMD's pid) and, as a child
// subreaper (PR_SET_CHILD_SUBREAPER), inherits every descendant whose parent exits. ProcessTree
// names the processes that belong to CMD: the members of CMD's process group, CMD's descendants,
// and the children of this process (a subreaper's children are CMD or orphans of CMD's tree).
// Signals to the tree go to all of them, so `sh -c 'worker & wait'`, a pipeline and even a
// `setsid` grandchild are reached while fencelock lives.
//
// When fencelock itself dies (SIGKILL, the OOM killer), the Guardian ends the tree: a small
// process forked before any thread, in a session of its own, that waits on a pipe whose only
// writer is fencelock. The kernel closes that pipe when fencelock dies, and the guardian sends
// SIGKILL to CMD's process group at once. CMD also has PR_SET_PDEATHSIG = SIGKILL (set in the
// child, which then checks that its parent is still the one that forked it). What escapes when
// fencelock dies: a descendant that left CMD's process group (setsid, setpgid) and whose parent is
// gone. A PID namespace (--pid-namespace) closes that gap: see PidNamespace below.
//
// Thread-safety: ProcessTree's functions are thread-compatible (they read /proc). Guardian::start
// must run before the process starts threads; its other members from one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "unique_fd.h"

namespace fencelock::cli {

class ProcessTree {
 public:
  explicit ProcessTree(pid_t root) : root_(root) {}

  pid_t root() const { return root_; }

  // The members that have not exited (zombies left out), found in /proc. A process is a member
  // if it is in the root's process group, descends from the root, or is a child of this process.
  std::vector<pid_t> members() const;

  // Sends `signo` to the root's process group and to every member. Returns how many members
  // (outside the group's own delivery) were found.
  int signal(int signo) const;

 private:
  pid_t root_;
};

// Reaps every exited child of this process without blocking. `root_status` receives the wait
// status of `root` if it was reaped (stops of `root` are reported too when `report_stops`).
// Returns true if `root` was reaped or reported stopped; `stopped` tells which.
bool reap_children(pid_t root, bool report_stops, int& root_status, bool& stopped);

// Ends CMD's process group when fencelock dies. Inactive (does nothing) if it could not start.
class Guardian {
 public:
  Guardian() = default;
  // Forks the guardian. REQUIRES: no other thread of this process has been started yet.
  static Guardian start();

  bool active() const { return fd_.valid(); }
  // From now on the guardian kills process group `pgid` if fencelock dies.
  void arm(pid_t pgid);
  // The tree is gone: the guardian exits without killing anything.
  void stand_down();

 private:
  explicit Guardian(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

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

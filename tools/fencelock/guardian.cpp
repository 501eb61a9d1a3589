#include "guardian.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <limits>
#include <new>
#include <utility>

#include "process_tree.h"

namespace fencelock::cli {
namespace {

constexpr std::int64_t kNeverNs = std::numeric_limits<std::int64_t>::max();

std::int64_t to_ns(Guardian::Clock::time_point t) {
  if (t == Guardian::kNever) return kNeverNs;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::int64_t now_ns() { return to_ns(Guardian::Clock::now()); }

}  // namespace

// Lives in a MAP_SHARED anonymous mapping made before the fork: fencelock and the guardian see
// the same atomics. Lock-free atomics are address-free, so they work across processes.
struct Guardian::Shared {
  std::atomic<std::int64_t> term_at{kNeverNs};  // steady_clock nanoseconds
  std::atomic<std::int64_t> kill_at{kNeverNs};
  std::atomic<std::uint32_t> terminated{0};  // SIGTERM was claimed (by fencelock or the guardian)
  std::atomic<std::uint32_t> guardian_sent_sigterm{0};
  std::atomic<std::uint32_t> killed{0};  // the guardian sent SIGKILL at kill_at
  std::atomic<pid_t> pid{-1};
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<pid_t>::is_always_lock_free);

void Guardian::Unmap::operator()(Shared* shared) const {
  shared->~Shared();
  ::munmap(shared, sizeof(Shared));
}

namespace {

// After SIGKILL, how often the tree is looked at again (a process forking as SIGKILL arrived may
// leave a child that the first round did not see), and for how many rounds at most once
// fencelock is gone (a process in uninterruptible sleep dies when it leaves it; the guardian
// does not wait for it for ever).
constexpr std::int64_t kRekillNs = 20'000'000;
constexpr int kRoundsAfterFencelock = 50;
// How long stand_down() waits for the guardian to exit (it finishes a kill round first).
constexpr std::int64_t kStandDownWaitNs = 2'000'000'000;

// Closes every descriptor but `a` and `b`.
void close_all_but(int a, int b) {
  if (a > b) std::swap(a, b);
  if (a > 0) ::close_range(0, static_cast<unsigned>(a) - 1, 0);
  if (b > a + 1) ::close_range(static_cast<unsigned>(a) + 1, static_cast<unsigned>(b) - 1, 0);
  ::close_range(static_cast<unsigned>(b) + 1, ~0U, 0);
}

// Waits until `fd` is readable or hung up (true), or `timeout_ns` passed (false; < 0: no
// timeout). ppoll's nanosecond timeout, with the timer slack set to 1 ns, wakes on time.
bool wait_readable(int fd, std::int64_t timeout_ns) {
  pollfd p{fd, POLLIN, 0};
  timespec ts{};
  timespec* timeout = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
    timeout = &ts;
  }
  return ::ppoll(&p, 1, timeout, nullptr) > 0;
}

// SIGKILL to CMD's group at once, then to every other process of the tree, each as soon as a
// scan of /proc reads it, scanning again until the tree stands still (ProcessTree::
// signal_settled): a command whose work keeps moving to new pids (fork, exit, the child goes on)
// outran a scan-then-kill round every time. fencelock, stopped but alive, inherits the orphans of
// the tree and reaps none of them, so none is lost by the order. Returns how many living
// processes the last scan found.
int kill_tree(const ProcessTree& tree, std::vector<pid_t> known_zombies = {}) {
  return static_cast<int>(tree.signal_settled(SIGKILL, std::move(known_zombies)).size());
}

// fencelock is gone, and orphans are re-parented to init: a process killed before its children
// were read would take them out of the tree. So the tree is frozen first (SIGSTOP on sight, until
// it stands still: a stopped process keeps its children and forks no more), then every process
// found gets SIGKILL, as does CMD's group.
int kill_orphaned_tree(const ProcessTree& tree) {
  const std::vector<pid_t> pids = tree.signal_settled(SIGSTOP);
  ::kill(-tree.root(), SIGKILL);
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  return static_cast<int>(pids.size());
}

// fencelock is gone: nothing renews the lease and nothing else guards the tree. Kills it
// (again every 20 ms while some of it is left, for a bounded time) and exits.
[[noreturn]] void die_with_fencelock(pid_t pgid) {
  const ProcessTree orphaned(pgid, -1);  // fencelock's pid may already belong to another process
  for (int round = 0; round < kRoundsAfterFencelock && kill_orphaned_tree(orphaned) > 0; ++round) {
    const timespec pause{0, kRekillNs};
    ::nanosleep(&pause, nullptr);
  }
  _exit(0);
}

// On a saturated CPU a sleeping process of normal priority can wake tens of milliseconds late
// (measured: up to 110 ms on a loaded 2-core machine). The guardian sleeps almost always and
// works only at a deadline, so it asks for the real-time round-robin class at its highest
// priority, which wakes before any normal process, or failing that (no CAP_SYS_NICE, no
// RLIMIT_RTPRIO) for the lowest nice value RLIMIT_NICE allows. An unprivileged user usually
// gets neither: then the guardian runs at normal priority.
void raise_priority() {
  // The highest real-time priority: a command may run real-time threads itself (chrt -r 50), and
  // at priority 1 such a command, hopping between pids, wrote on for up to 1.2 s past the lease.
  rlimit limit{};
  const int allowed_rt = ::getrlimit(RLIMIT_RTPRIO, &limit) == 0 && limit.rlim_cur > 0
                             ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 99))
                             : 1;
  for (int priority : {::sched_get_priority_max(SCHED_RR), allowed_rt}) {
    sched_param param{};
    param.sched_priority = priority;
    if (::sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &param) == 0) return;
  }
  if (::getrlimit(RLIMIT_NICE, &limit) != 0 || limit.rlim_cur == 0) return;
  // RLIMIT_NICE n allows nice values down to 20 - n.
  const rlim_t allowed = std::min<rlim_t>(limit.rlim_cur, 40);
  const int nice = 20 - static_cast<int>(allowed);
  if (nice < ::getpriority(PRIO_PROCESS, 0)) ::setpriority(PRIO_PROCESS, 0, nice);
}

// The guardian's watch over CMD's tree while fencelock lives: when to wake, and what to do then.
// The deadlines are read again at every wake (a renewal may have moved them). The tree is read
// ahead of kill_at, so that SIGKILL at kill_at waits for no /proc scan: the group and those
// processes get it at once, the rest of the tree right after (and again every 20 ms while some
// of it is found). A scan reads every process of the machine, so the lead is twice the last
// scan's time (at least 20 ms, at most 250 ms), and a scan still running at kill_at stops there:
// with 10,000 processes on the machine a scan took 65 ms, and a fixed 20 ms lead let the kill
// come 30 ms after the validity.
class Watch {
 public:
  Watch(const ProcessTree& tree, Guardian::Shared& shared) : tree_(tree), shared_(shared) {}

  // How long to sleep, in ns; -1: until fencelock writes or dies.
  std::int64_t timeout(std::int64_t now) const {
    if (killing_) return kRekillNs;
    if (killed_) return -1;
    const std::int64_t kill_at = shared_.kill_at.load();
    std::int64_t next = kill_at;
    if (kill_at != kNeverNs && scanned_for_ != kill_at) next = kill_at - scan_lead();
    if (shared_.terminated.load() == 0) next = std::min(next, shared_.term_at.load());
    return next == kNeverNs ? -1 : std::max<std::int64_t>(0, next - now);
  }

  void wake(std::int64_t now) {
    if (killed_) {
      killing_ = kill_tree(tree_) > 0;
      return;
    }
    if (now >= shared_.term_at.load() && shared_.terminated.exchange(1) == 0) {
      shared_.guardian_sent_sigterm.store(1);
      tree_.signal_and_continue(SIGTERM);
    }
    const std::int64_t kill_at = shared_.kill_at.load();
    if (now >= kill_at) {
      shared_.killed.store(1);
      killed_ = true;
      ::kill(-tree_.root(), SIGKILL);
      // Only a scan made for this deadline, shortly before it: an older one may name pids that
      // exited and were reused since.
      std::vector<pid_t> zombies;
      if (scanned_for_ == kill_at) {
        for (pid_t pid : scanned_) ::kill(pid, SIGKILL);
        zombies = std::move(scanned_zombies_);
      }
      // fencelock's children first (no scan of /proc): where hopping work lands.
      (void)tree_.kill_children_of_owner();
      killing_ = kill_tree(tree_, std::move(zombies)) > 0;
    } else if (kill_at != kNeverNs && now >= kill_at - scan_lead() && scanned_for_ != kill_at) {
      scanned_ = tree_.members(scanned_zombies_,
                               Guardian::Clock::time_point(std::chrono::nanoseconds(kill_at)));
      scanned_for_ = kill_at;
      scan_ns_ = now_ns() - now;
    }
  }

  // Times one scan of the tree, for the first lead.
  void measure_scan() {
    const std::int64_t start = now_ns();
    std::vector<pid_t> zombies;
    (void)tree_.members(zombies);
    scan_ns_ = now_ns() - start;
  }

 private:
  std::int64_t scan_lead() const {
    return std::clamp<std::int64_t>(2 * scan_ns_ + 5'000'000, 20'000'000, 250'000'000);
  }

  std::int64_t scan_ns_ = 0;  // how long the last scan took
  const ProcessTree& tree_;
  Guardian::Shared& shared_;
  std::vector<pid_t> scanned_;           // the tree, read shortly before kill_at
  std::vector<pid_t> scanned_zombies_;   // and its zombies then
  std::int64_t scanned_for_ = kNeverNs;  // the kill_at it was read for
  bool killed_ = false;                  // SIGKILL was sent at kill_at
  bool killing_ = false;                 // and some of the tree was found in the last round
};

// The guardian's whole life. It was forked from a process without threads, so it may allocate
// (ProcessTree reads /proc into vectors).
[[noreturn]] void guard(int control_fd, int exit_fd, Guardian::Shared& shared, pid_t fencelock) {
  ::setsid();  // out of fencelock's process group and terminal: their signals do not reach it
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN,
                    SIGTTOU, SIGALRM, SIGVTALRM, SIGPROF}) {
    ::sigaction(signo, &ignore, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_NAME, "fencelock-guard");
  ::prctl(PR_SET_TIMERSLACK, 1UL);  // wake at the deadline, not up to 50 us after it
  raise_priority();
  if (::chdir("/") != 0) {
    // Only so that a directory is not kept busy; the guardian works from anywhere.
  }
  // Keep only the two pipes: inherited sockets and files must not outlive fencelock here.
  close_all_but(control_fd, exit_fd);
  shared.pid.store(::getpid());
  const char ready = 'g';
  if (::write(exit_fd, &ready, 1) != 1) _exit(0);  // fencelock is gone already

  pid_t pgid = 0;
  std::size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(&pgid);
  while (got < sizeof pgid) {
    const ssize_t n = ::read(control_fd, bytes + got, sizeof pgid - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // fencelock ended before starting a command
    got += static_cast<std::size_t>(n);
  }
  if (pgid <= 1) _exit(0);
  const ProcessTree tree(pgid, fencelock);
  Watch watch(tree, shared);
  watch.measure_scan();
  for (;;) {
    if (wait_readable(control_fd, watch.timeout(now_ns()))) {
      char message = 0;
      const ssize_t n = ::read(control_fd, &message, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1) _exit(0);             // stood down: the tree is gone
      die_with_fencelock(tree.root());  // end of file: fencelock died with the tree alive
    }
    watch.wake(now_ns());
  }
}

}  // namespace

Guardian::~Guardian() = default;

Guardian Guardian::start() {
  void* map =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return {};
  std::unique_ptr<Shared, Unmap> shared(new (map) Shared());
  int control[2];
  int exit[2];
  if (::pipe2(control, O_CLOEXEC) != 0) return {};
  UniqueFd control_read(control[0]);
  UniqueFd control_write(control[1]);
  if (::pipe2(exit, O_CLOEXEC) != 0) return {};
  UniqueFd exit_read(exit[0]);
  UniqueFd exit_write(exit[1]);
  const pid_t fencelock = ::getpid();
  // Double fork: the guardian is re-parented to init at once, so it is never a child of
  // fencelock (which reaps every child) nor a member of the command's tree.
  const pid_t middle = ::fork();
  if (middle < 0) return {};
  if (middle == 0) {
    if (::fork() == 0) guard(control_read.get(), exit_write.get(), *shared, fencelock);
    _exit(0);
  }
  int status = 0;
  while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  control_read.reset();
  exit_write.reset();
  // The guardian says when it is in its own session; end of file: it could not start.
  char ready = 0;
  ssize_t n = 0;
  do {
    n = ::read(exit_read.get(), &ready, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) {
    errno = ECHILD;
    return {};
  }
  Guardian guardian;
  guardian.control_ = std::move(control_write);
  guardian.exit_ = std::move(exit_read);
  guardian.shared_ = std::move(shared);
  return guardian;
}

pid_t Guardian::pid() const { return shared_ ? shared_->pid.load() : -1; }

void Guardian::set_deadlines(Clock::time_point term_at, Clock::time_point kill_at) {
  if (!shared_) return;
  // kill_at first: a guardian that reads the new term_at then reads the new kill_at too.
  shared_->kill_at.store(to_ns(kill_at));
  shared_->term_at.store(to_ns(term_at));
}

void Guardian::arm(pid_t pgid) {
  if (!active()) return;
  if (::write(control_.get(), &pgid, sizeof pgid) != static_cast<ssize_t>(sizeof pgid)) {
    control_.reset();
  }
}

void Guardian::arm_in_child(int arming_fd) {
  const pid_t self = ::getpid();
  ssize_t ignored = ::write(arming_fd, &self, sizeof self);
  (void)ignored;
}

bool Guardian::claim_termination() { return !shared_ || shared_->terminated.exchange(1) == 0; }

bool Guardian::sent_sigterm() const { return shared_ && shared_->guardian_sent_sigterm.load(); }

bool Guardian::killed_at_deadline() const { return shared_ && shared_->killed.load(); }

void Guardian::stand_down() {
  if (!active()) return;
  const char done = 'd';
  ssize_t ignored = ::write(control_.get(), &done, 1);
  (void)ignored;
  control_.reset();
  // The guardian reads the byte between two kill rounds; until it has exited it may still
  // signal the owner's children, which by then can be other processes of ours (a sanitizer's
  // leak checker clones a tracer at exit: killed there, it left this process stopped for good).
  if (!exit_.valid()) return;
  const std::int64_t give_up = now_ns() + kStandDownWaitNs;
  for (;;) {
    const std::int64_t left = give_up - now_ns();
    if (left <= 0 || !wait_readable(exit_.get(), left)) return;
    char byte = 0;
    const ssize_t n = ::read(exit_.get(), &byte, 1);
    if (n == 0) return;  // end of file: the guardian has exited
    if (n < 0 && errno != EINTR && errno != EAGAIN) return;
  }
}

}  // namespace fencelock::cli

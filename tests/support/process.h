// Child processes for integration tests: real servers (redis-server, later postgres and etcd) and
// the `fencelock` CLI run as separate processes, started and reaped by these helpers.
//
// Contract:
// - A ChildProcess owns one child. Its destructor sends SIGKILL to the child's process group and
//   reaps it, so a test that fails half-way leaves no process behind. The destructor never throws
//   and waits only for the kernel to deliver SIGKILL.
// - Every child runs in its own process group (so a terminal's Ctrl-C reaches the test binary, not
//   the servers, and signal_group() reaches grandchildren such as the command under `fencelock
//   run`), with stdin from /dev/null, default signal dispositions, an empty signal mask and no file
//   descriptors other than 0, 1, 2 inherited from the test (an inherited client socket would keep a
//   connection open that a test believes closed).
// - extra_env entries are "NAME=VALUE" (set or override) or "NAME" (remove from the inherited
//   environment).
// - argv[0] is looked up in PATH unless it contains a '/'.
//
// Thread-safety: a ChildProcess is not synchronized; use one object from one thread at a time.
// Different objects may be used concurrently. The free functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencelock::testing {

// Knobs for ChildProcess::spawn_with(); the defaults are those of ChildProcess::spawn().
struct SpawnOptions {
  std::vector<std::string> extra_env;  // "NAME=VALUE" sets, "NAME" removes
  std::string stdout_file;             // "" = inherit the test's stdout; else truncate and write
  std::string stderr_file;             // "" = inherit the test's stderr; else truncate and write
  // Descriptors to install as the child's stdin/stdout/stderr instead (-1 = not used). Not owned:
  // the caller closes its copies after spawn. A descriptor here wins over the file name above.
  int stdin_fd = -1;  // -1 = /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The child gets SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG), so servers
  // do not outlive a test binary killed by ctest's timeout. Only for children spawned from a
  // thread that outlives them (normally the test's main thread).
  bool die_with_parent = false;
};

class ChildProcess {
 public:
  // Starts argv[0] with arguments argv[1..]. Throws std::runtime_error when argv is empty, the
  // program is not found or not executable, an output file cannot be opened, or fork/exec fails.
  static ChildProcess spawn(std::vector<std::string> argv, std::vector<std::string> extra_env = {},
                            std::string stdout_file = "", std::string stderr_file = "");
  static ChildProcess spawn_with(std::vector<std::string> argv, const SpawnOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // The child's pid (also its process group id); -1 for a moved-from object.
  pid_t pid() const { return pid_; }

  // True while the child has not exited (a stopped child is running). Reaps it if it has exited.
  bool running();

  // Blocks until the child exits. Returns its exit code, or 128 + signal number if a signal
  // killed it (the shell convention). Calling again returns the same value.
  int wait();

  // Like wait(), but gives up after `timeout` and returns nullopt (the child keeps running).
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

  // Sends `sig` to the child only; to its whole process group. No-op once the child is reaped.
  void signal(int sig);
  void signal_group(int sig);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  void record(int wait_status);
  void kill_and_reap() noexcept;

  pid_t pid_ = -1;
  std::optional<int> exit_code_;  // set once reaped
};

// What run_command() observed.
struct RunResult {
  int exit_code = -1;  // exit code, or 128 + signal; 137 after a timeout (SIGKILL)
  std::string stdout_text;
  std::string stderr_text;
  bool timed_out = false;
};

// The whole content of the file at `path`; "" if it is missing.
std::string read_file(const std::string& path);

// Checks `condition` every `step` until it holds (true) or `limit` passes (false; the condition
// is checked once more at the end). Tests wait for events with this, never a bare sleep.
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = std::chrono::seconds(15),
                std::chrono::milliseconds step = std::chrono::milliseconds(2));

// Runs argv to completion with `stdin_text` on its stdin, capturing stdout and stderr. The child
// and its process group are killed with SIGKILL after `timeout`. After the child exits, output
// still arriving from grandchildren that inherited the pipes is collected for up to 1 s more;
// grandchildren in the child's process group still holding the pipes then get SIGKILL, so none
// outlives the call. Environment as for ChildProcess::spawn. Throws std::runtime_error if the
// child cannot start.
RunResult run_command(const std::vector<std::string>& argv,
                      const std::vector<std::string>& extra_env = {},
                      std::string_view stdin_text = "",
                      std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released). Another
// process may still take it; callers that bind it should retry with a new port on EADDRINUSE.
std::uint16_t free_loopback_port();

// Creates a fresh directory "$TMPDIR/<prefix>XXXXXX" (or under /tmp) and returns its path.
// Throws std::runtime_error on failure.
std::string make_temp_dir(std::string_view prefix);

// Removes a directory tree; errors are ignored (for destructors).
void remove_tree(const std::string& path) noexcept;

// Full path of `program` found in PATH (or `program` itself if it contains '/' and is
// executable); nullopt if not found.
std::optional<std::string> find_executable(std::string_view program);

// RFC 3986 percent-encoding of everything but unreserved characters, for user names and
// passwords inside URIs.
std::string percent_encode(std::string_view text);

// The last `lines` lines of a server's log file, for failure messages.
std::string file_tail(const std::string& path, int lines);

}  // namespace fencelock::testing

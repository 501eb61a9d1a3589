// The child processes of a torture run: the workers (this program re-executed as `fencelock
// torture-worker`) and the server-control program (--server-control PROGRAM).
//
// The control program runs by fork and exec with an argument vector (no shell parses anything),
// its output appended to a log file, bounded by a timeout. Its exit status says only that it ran
// and claims success: what it did to a server is seen by server_probe.h, never taken from it.
//
// Thread-safety: each object is used by one thread at a time (the orchestrator's).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace fencelock::torture {

// One worker process, started by re-executing this program; killed (SIGKILL) and reaped by the
// destructor.
// The secret variables (FENCELOCK_BACKEND and the backends' password variables) reach a worker
// through a pipe at descriptor kSecretsFd, named by kSecretsFdVariable, not in its environment:
// take_secrets_from_pipe(), run by the worker once it is not dumpable, puts them into its
// environment.
inline constexpr const char* kSecretsFdVariable = "FENCELOCK_SECRETS_FD";
inline constexpr int kSecretsFd = 9;
bool is_secret_variable(std::string_view entry);  // "NAME=VALUE"
// REQUIRES: no other thread runs (it sets environment variables).
void take_secrets_from_pipe();

class WorkerProcess {
 public:
  // The backend URI travels through a pipe (FENCELOCK_BACKEND, kSecretsFd), not in the argument
  // list or the environment, which other processes can read.
  WorkerProcess(int id, std::vector<std::string> argv, const std::string& backend,
                const std::vector<std::string>& env);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // `extra_env` is added for this start only (a skewed clock); "NAME=" removes NAME.
  void start(const std::vector<std::string>& extra_env = {});
  void signal(int sig) const;
  long pid() const { return static_cast<long>(pid_); }
  int id() const { return id_; }
  // True when the process is stopped (SIGSTOP took effect): state 'T' in /proc/PID/stat.
  bool stopped() const;
  // Waits up to `limit` for the process to exit; true when it did.
  bool wait_for(std::chrono::milliseconds limit);
  // True when the process died of this SIGKILL (not of something else before it).
  bool kill_and_reap();

 private:
  int id_;
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
};

class ControlProgram {
 public:
  // `program` as given when it names a path, else its first match in PATH (as a shell would
  // find it); its output goes to `log_path` (never through a symlink).
  ControlProgram(const std::string& program, std::string log_path);

  // Runs `PROGRAM ARGS...`; true when it exited 0 within the timeout (60 s; then SIGKILL). A
  // failure is kept for the report (failures()).
  bool run(const std::vector<std::string>& args);
  // Each failed call, described ("'PROGRAM kill 7101' exited 1").
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  std::string path_;
  std::string log_path_;
  std::vector<std::string> failures_;
};

}  // namespace fencelock::torture

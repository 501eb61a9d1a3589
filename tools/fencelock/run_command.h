// `fencelock run KEY -- CMD [ARGS...]`: hold a lock around a command.
//
// Takes the lock, starts CMD with FENCELOCK_KEY, FENCELOCK_TOKEN, FENCELOCK_ISSUER (the lock that
// issued the token, for a fence) and FENCELOCK_BACKEND in its environment, lets the library
// renew the lease while CMD runs, and releases it once CMD has
// exited and every process it started is gone. If the lease is lost, CMD's processes get SIGTERM,
// then SIGKILL after the kill grace, which ends at the lease's validity unless
// --grace-outlives-lease (supervisor.h has the rule; process_tree.h says how the processes are
// found, and how they die with fencelock). With
// --metrics FILE, the Client's metrics are written to FILE in Prometheus text format when `run`
// exits (on every exit after the client connected). See docs/CLI.md.
#pragma once

#include <string>
#include <vector>

namespace fencelock::cli {

struct RunArgs {
  std::string backend;  // --backend; empty: $FENCELOCK_BACKEND, then the default
  bool json = false;
  std::string ttl = "10s";
  std::string wait = "0s";
  std::string kill_grace = "5s";
  // The kill grace may run past valid_until() (the command's writes must then be fenced).
  bool grace_outlives_lease = false;
  // CMD runs as init of a new PID namespace (process_tree.h).
  bool pid_namespace = false;
  std::string metrics_file;  // --metrics; empty: no metrics are written
  // --pass-secrets: leave FENCELOCK_REDIS_PASSWORD, FENCELOCK_ETCD_PASSWORD and PGPASSWORD in
  // CMD's environment (removed by default).
  bool pass_secrets = false;
  std::string key;
  std::vector<std::string> command;
};

// Returns the process exit code (exit_codes.h, or the command's own).
int run_command(const RunArgs& args);

}  // namespace fencelock::cli

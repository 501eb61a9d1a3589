// `fencelock elect NAME [VALUE]` and `fencelock elect --observe NAME`: leader election over etcd
// (fencelock/election.h), interoperable with `etcdctl elect`.
//
// Campaign: blocks until elected (or --wait runs out: exit 75), prints one line saying so, then
// holds the leadership until SIGINT/SIGTERM/SIGHUP/SIGQUIT (resigns, exit 0) or until the
// leadership is lost (exit 73). Observe: prints the leader now and after every change, one line
// each, until a signal ends it (exit 0). See docs/CLI.md.
#pragma once

#include <string>

namespace fencelock::cli {

struct ElectArgs {
  std::string backend;  // --backend; empty: $FENCELOCK_BACKEND, then the default
  bool json = false;
  bool observe = false;
  std::string ttl = "10s";
  std::string wait;  // empty: wait until elected
  std::string name;
  std::string value;  // empty: "<host>:<pid>"
};

// Returns the process exit code (exit_codes.h).
int elect_command(const ElectArgs& args);

}  // namespace fencelock::cli

// `fencelock torture --backend URI [--workers N] [--duration DUR] [--faults LIST] [--json]`:
// W worker processes contend for one lock and increment a shared register through a fence while
// the orchestrator injects faults; the checker (checker.h) then gives a verdict: SAFE (exit 0),
// UNSAFE (exit 1: a safety violation), INCONCLUSIVE (exit 2: the run proves nothing). It also
// reports overlaps and unavailability after faults. See docs/RELIABILITY.md.
//
// Faults (--faults, comma separated; default pause,kill,latency,drop,partition):
//   pause      SIGSTOP the worker inside its critical section (or any) for 1.5 TTL, then SIGCONT
//   kill       SIGKILL a worker and start a new one in its place
//   latency    every connection to the servers gets 100 ms each way for one TTL
//   drop       every connection to the servers is reset, and new ones refused, for 300 ms
//   partition  a minority of the servers (the only one, if there is one) is black-holed for
//              1.5 TTL
//   skew       a worker restarts with its clocks (monotonic too) at a quarter of the real rate
//              for 5 TTL, then restarts with the real clock (libfaketime)
//   jump       a worker's wall clock steps back 30 s for 2 TTL (libfaketime; monotonic unchanged)
//   server-kill  one server (in turn) is crashed with `--server-control PROGRAM kill PORT` and
//              brought back one TTL later with `PROGRAM start` (scripts/servers.sh)
//   failover   PostgreSQL with a standby: `PROGRAM failover PORT LAG` stalls replication for
//              4 TTL, crashes the primary (the URI's first host) and promotes the standby;
//              once per run
// Network faults run through a FaultProxy per server on 127.0.0.1 (workers connect to it).
#pragma once

#include <string>

#include "torture/worker.h"

namespace fencelock::cli {

struct TortureArgs {
  std::string backend;
  bool json = false;
  int workers = 3;
  std::string duration = "30s";
  std::string ttl = "2s";
  std::string critical = "20ms";
  std::string faults = "pause,kill,latency,drop,partition";
  std::string key = "torture";
  std::string fence = "full";    // full, write-only, none
  bool unsafe_no_fence = false;  // the broken variant (--fence none): the register applies all
  std::string work_dir;          // where logs go; default a fresh directory under /tmp
  std::string server_control;    // for server-kill, e.g. scripts/servers.sh
  int extra_leases = 2000;       // many-leases: long leases per worker besides the contended one
  std::string api = "blocking";  // blocking, async: how the workers call the library
};

int torture_command(const TortureArgs& args);

// `fencelock torture-worker ...` (hidden): one worker process.
int torture_worker_command(const torture::WorkerArgs& args);

}  // namespace fencelock::cli

// `fencelock demo [--backend URI]...`: the story of fencing in under a minute. For each backend,
// two worker processes contend for one lock; the one holding it is paused (SIGSTOP) between its
// read and its write for 1.5 TTL; the other is granted the lock with a larger token and writes;
// the paused one wakes, learns from lost() that it lost the lock, writes anyway with its stale
// token and is rejected by the fence. Ends with a table: backend, tokens issued, stale writes
// rejected, overlaps, lost() delay. Without --backend it uses the servers of scripts/servers.sh
// ($FENCELOCK_REDIS_URI, $FENCELOCK_REDLOCK_URI, $FENCELOCK_PG_URI, $FENCELOCK_ETCD_URI) when
// any is set, else memory:// in this process (two Clients, the paused worker's lease unrenewed, a
// FenceGate), and then says how to include real servers. Exit 0 when every backend was safe, 1
// when a run found a violation, 2 when one proved nothing.
#pragma once

#include <string>
#include <vector>

namespace fencelock::cli {

struct DemoArgs {
  std::vector<std::string> backends;
  bool json = false;
};

int demo_command(const DemoArgs& args);

}  // namespace fencelock::cli

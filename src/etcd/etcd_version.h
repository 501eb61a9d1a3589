// Which etcd server versions have a known defect that breaks fencelock's lease guarantees.
//
// A leader that stalls (SIGSTOP, a slow disk, a VM pause) and resumes after the others elected a
// new leader still believes, for a moment, that it leads: its lease clock ran on while no
// keep-alive reached it, so it proposes revoking every lease it thinks expired, and raft forwards
// those proposals to the new leader, which commits them. Live leases are revoked while their
// holders keep them alive, and the next waiter is granted while the holder still believes it
// holds (etcd-io/etcd#15247, #12528; fixed in 3.4.31 and 3.5.13 by ignoring the revocations of a
// member that is not the leader in raft's own state; 3.6.0 and later have the fix).
// fencelock's torture tester shows it on etcd 3.4.23 (minority-stall of the leader).
#pragma once

#include <optional>
#include <string_view>

namespace fencelock::detail::etcd {

struct ServerVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
};

// "3.4.23" (a suffix such as "-rc.1" or "+git" is ignored); nullopt when it is not
// MAJOR.MINOR.PATCH.
std::optional<ServerVersion> parse_server_version(std::string_view text);

// True when a stalled former leader can revoke live leases (see above).
bool revokes_live_leases_after_a_leader_stall(const ServerVersion& version);

}  // namespace fencelock::detail::etcd

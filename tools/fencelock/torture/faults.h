// The torture tester's fault kinds, in one table: each kind's name, what it needs (a proxy per
// server, the server-control program, libfaketime) and how the checker reads it. The
// orchestrator's injection and the checker's evidence switch over Fault; every list of kinds
// (the --faults check, its error and help text) is made from the table.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace fencelock::torture {

enum class Fault {
  kPause,
  kKill,
  kLatency,
  kDrop,
  kPartition,
  kDelayOne,
  kSkew,
  kJump,
  kServerKill,
  kMinorityStall,
  kAdminDelete,
  kManyLeases,
  kEvict,
  kCancelRace,
  kFailover,
};

struct FaultSpec {
  Fault fault;
  std::string_view name;  // as --faults and the reports spell it
  std::string_view help;  // a few words for --help ("" when the name says it)
  // Injected by a TCP proxy per server in front of the workers (the URI rewritten to them).
  bool through_proxy = false;
  // Needs --server-control PROGRAM (scripts/servers.sh).
  bool server_control = false;
  // Acts on the URI's servers themselves (the orchestrator keeps their list and probes them).
  bool on_servers = false;
  // Needs libfaketime (a worker's clock).
  bool clock = false;
  // Ends every session of every server that took effect (the checker: a PostgreSQL advisory
  // holder told it lost, or silent, lost its lock then).
  bool cuts_every_session = false;
  // Scheduled in turn with the others (many-leases is instead a condition of the whole run).
  bool scheduled = true;
};

// Every kind, in the order the help lists them.
std::span<const FaultSpec> fault_specs();
// The kind named `name`, or nullptr.
const FaultSpec* find_fault(std::string_view name);
// The name of `fault`.
std::string_view fault_name(Fault fault);
// Whether `name` (a report's kind) names `fault`.
bool is_fault(std::string_view name, Fault fault);
// "pause, kill, ...": every name, for an error message.
std::string fault_names();
// "pause (SIGSTOP a holder past its TTL), kill (...), ...": every name with its help.
std::string fault_help();

}  // namespace fencelock::torture

#include "torture/faults.h"

#include <algorithm>
#include <array>

namespace fencelock::torture {
namespace {

constexpr std::array kSpecs = {
    FaultSpec{.fault = Fault::kPause, .name = "pause", .help = "SIGSTOP a holder past its TTL"},
    FaultSpec{.fault = Fault::kKill, .name = "kill", .help = "SIGKILL a worker, start another"},
    FaultSpec{.fault = Fault::kLatency,
              .name = "latency",
              .help = "every chunk held 100 ms, through a TCP proxy per server on 127.0.0.1",
              .through_proxy = true},
    FaultSpec{.fault = Fault::kDrop,
              .name = "drop",
              .help = "every proxied connection reset, as a crashed server",
              .through_proxy = true,
              .cuts_every_session = true},
    FaultSpec{.fault = Fault::kPartition,
              .name = "partition",
              .help = "a minority of the servers, or the only one, frozen",
              .through_proxy = true,
              .cuts_every_session = true},
    FaultSpec{.fault = Fault::kDelayOne,
              .name = "delay-one",
              .help = "one request or reply held 1.5 TTL",
              .through_proxy = true},
    FaultSpec{.fault = Fault::kSkew,
              .name = "skew",
              .help = "a worker's clock at a quarter of the real rate: libfaketime",
              .clock = true},
    FaultSpec{.fault = Fault::kJump,
              .name = "jump",
              .help = "a worker's wall clock 30 s back: libfaketime",
              .clock = true},
    FaultSpec{.fault = Fault::kServerKill,
              .name = "server-kill",
              .help = "one server crashed and restarted",
              .server_control = true,
              .on_servers = true,
              .cuts_every_session = true},
    FaultSpec{.fault = Fault::kMinorityStall,
              .name = "minority-stall",
              .help = "SIGSTOP one server",
              .server_control = true,
              .on_servers = true},
    FaultSpec{.fault = Fault::kAdminDelete,
              .name = "admin-delete",
              .help = "the lock taken away behind its holder",
              .server_control = true},
    FaultSpec{.fault = Fault::kManyLeases,
              .name = "many-leases",
              .help = "each worker also holds --extra-leases long leases",
              .scheduled = false},
    FaultSpec{.fault = Fault::kEvict,
              .name = "evict",
              .help = "memory pressure on Redis: PROGRAM fill PORT",
              .server_control = true,
              .on_servers = true},
    FaultSpec{.fault = Fault::kCancelRace,
              .name = "cancel-race",
              .help = "waits that time out or are cancelled about when a holder releases"},
    FaultSpec{.fault = Fault::kFailover,
              .name = "failover",
              .help = "PostgreSQL: replication stalled, primary crashed, standby promoted",
              .server_control = true,
              .on_servers = true,
              .cuts_every_session = true},
};

}  // namespace

std::span<const FaultSpec> fault_specs() { return kSpecs; }

const FaultSpec* find_fault(std::string_view name) {
  const auto* it = std::find_if(kSpecs.begin(), kSpecs.end(),
                                [&](const FaultSpec& spec) { return spec.name == name; });
  return it == kSpecs.end() ? nullptr : &*it;
}

std::string_view fault_name(Fault fault) {
  const auto* it = std::find_if(kSpecs.begin(), kSpecs.end(),
                                [&](const FaultSpec& spec) { return spec.fault == fault; });
  return it == kSpecs.end() ? std::string_view() : it->name;
}

bool is_fault(std::string_view name, Fault fault) {
  const FaultSpec* spec = find_fault(name);
  return spec != nullptr && spec->fault == fault;
}

std::string fault_names() {
  std::string out;
  for (const FaultSpec& spec : kSpecs) {
    if (!out.empty()) out += ", ";
    out += spec.name;
  }
  return out;
}

std::string fault_help() {
  std::string out;
  for (const FaultSpec& spec : kSpecs) {
    if (!out.empty()) out += ", ";
    out += spec.name;
    std::string needs(spec.help);
    if (spec.server_control) needs.append(needs.empty() ? "" : "; ").append("--server-control");
    if (!needs.empty()) out.append(" (").append(needs).append(")");
  }
  return out;
}

}  // namespace fencelock::torture

// The query options of an etcd:// or etcds:// URI, read once, without I/O (the certificate files
// are named here and read at connect): unit-tested and fuzzed with the URI parser.
#pragma once

#include <cstddef>
#include <string>

#include "core/uri.h"
#include "fencelock/status.h"

namespace fencelock::detail::etcd {

inline constexpr std::size_t kMaxNamespaceBytes = 256;

struct EtcdOptions {
  // namespace=PREFIX/: every lock and election under PREFIX/ (empty: none).
  std::string key_namespace;
  // allow_stale_leader_revoke=true|false: accept an etcd version that can revoke live leases
  // after a leader stall (etcd/etcd_version.h).
  bool allow_stale_leader_revoke = false;
  // etcds:// only: cacert (CA bundle; empty: the system roots), cert and key (a client
  // certificate: both or neither), as paths.
  std::string cacert, cert, key;
};

// kInvalidArgument naming the option for an unknown option, a value out of its range, a TLS
// option on etcd://, or a cert without its key (or a key without its cert).
Result<EtcdOptions> parse_etcd_options(const ParsedUri& uri);

// The options as the Client's description shows them ("namespace=locks%2F&..."; empty for the
// defaults): no paths.
std::string describe_etcd_options(const EtcdOptions& options);

}  // namespace fencelock::detail::etcd

// What the torture orchestrator sees of a server with its own eyes, as evidence that a fault of
// the server-control program took effect: a control program that exits 0 proves nothing by
// itself (a `true` would do). The checker (checker.h) weighs what is seen; this file only looks.
//
// probe_server() opens a fresh TCP connection, sends one request of the server's own protocol
// (Redis `PING`, a PostgreSQL SSLRequest, an HTTP/1.0 `GET /version` for etcd's client port)
// and waits up to a deadline for any reaction. The kernel completes the handshake of a stopped
// (SIGSTOPped) server from its listen backlog, so a stalled server shows as a connection that
// opens and stays silent; a crashed one refuses the connection. No credentials are needed: a
// reply that refuses the request (NOAUTH, a TLS alert, a closed connection) is a reply.
//
// redis_memory() reads `INFO` of one Redis (AUTH with the URI's credentials, or
// FENCELOCK_REDIS_USER / FENCELOCK_REDIS_PASSWORD, as the library does): evicted_keys, and
// used_memory against maxmemory. Plain TCP only.
//
// Thread-safety: the functions share no state; each blocks for at most its deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "torture/endpoints.h"
#include "torture/events.h"

namespace fencelock::torture {

enum class ProbeProtocol { kRedis, kPostgres, kEtcd };

// The protocol of the servers of a backend URI; nullopt for a scheme without servers
// (memory://).
std::optional<ProbeProtocol> probe_protocol(std::string_view uri);

// One probe of `server` (a named host is resolved first): kAnswered, kSilent, kRefused or
// kUnknown (events.h ProbeResult), within about `deadline`.
ProbeResult probe_server(const HostPort& server, ProbeProtocol protocol,
                         std::chrono::milliseconds deadline);

// Probes until the result is `wanted`, a probe at most every 50 ms, for at most `limit`; returns
// the last result (a server that takes a moment to go down or come back).
ProbeResult probe_until(const HostPort& server, ProbeProtocol protocol, ProbeResult wanted,
                        std::chrono::milliseconds deadline, std::chrono::milliseconds limit);

struct RedisMemory {
  std::int64_t evicted_keys = 0;
  std::int64_t used_memory = 0;
  std::int64_t maxmemory = 0;  // 0: no limit
};

// INFO of the Redis on `server`, with the credentials of `uri`; nullopt (and `why`, which never
// holds a credential) when it cannot be read.
std::optional<RedisMemory> redis_memory(const HostPort& server, const std::string& uri,
                                        std::chrono::milliseconds deadline, std::string& why);

}  // namespace fencelock::torture

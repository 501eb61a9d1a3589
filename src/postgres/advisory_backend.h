// postgres://...?mode=advisory (the default): session-level advisory locks (docs/PROTOCOLS.md,
// "PostgreSQL").
//
// A lock is an advisory lock held by one pooled session (session_pool.h); the key is mapped by
// advisory_key.h, so psql's pg_advisory_lock(12345) and fencelock's "12345" exclude each other.
// Waits happen in PostgreSQL's own FIFO lock queue (pg_advisory_lock under lock_timeout), never
// by polling; a stop token cancels them on the server. Nothing expires on the server: a lock is
// held while its session lives. The TTL sets the client side only: a health check of each
// holding session every ttl/3, and valid_until() = last successful check + ttl - drift. A session
// that dies (server restart, pg_terminate_backend, network cut) frees its locks at once and its
// leases are reported lost at the next check: no future validity can be promised, and fencing
// tokens carry safety.
#pragma once

#include <memory>

#include "core/backend.h"
#include "fencelock/options.h"
#include "postgres/postgres_uri.h"

namespace fencelock::detail::postgres {

// `wait_turn`: a wait longer than this (PostgreSQL's lock_timeout is a 32-bit count of
// milliseconds) queues again after each turn of it; a parameter only so tests can make a turn
// short.
std::unique_ptr<Backend> make_advisory_backend(const PostgresUri& uri, const ClientOptions& options,
                                               milliseconds wait_turn = kMaxDuration);

}  // namespace fencelock::detail::postgres

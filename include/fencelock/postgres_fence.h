// fencelock/postgres_fence.h: the PostgreSQL fence, checked inside the caller's own transaction
// on the caller's own libpq connection (see fencelock/fence.h for the other fences and what a
// fence protects). Includes <libpq-fe.h>: compile with libpq's include path (pkg-config
// --cflags libpq).
//
//   PQexec(conn, "BEGIN");
//   Status fenced = fencelock::PostgresFence::check(conn, "reports", lease->fencing());
//   if (!fenced.ok()) { PQexec(conn, "ROLLBACK"); /* kFenced: a newer holder wrote */ }
//   ... the reads and the write on conn ..., then PQexec(conn, "COMMIT");
//
// Thread-safety: the functions use the caller's connection, which the caller must not share
// across threads.
#pragma once

#include "fencelock/config.h"
#if !FENCELOCK_HAS_POSTGRES
#error "this fencelock was built without PostgreSQL (FENCELOCK_WITH_POSTGRES=OFF)"
#endif

#include <libpq-fe.h>

#include <string_view>

#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

struct PostgresFence {
  // CREATE TABLE fencelock_fences + CREATE OR REPLACE FUNCTION fencelock_fence(text, numeric,
  // text) and fencelock_fence(text, numeric) (a bare token) in the first schema of search_path
  // (src/postgres/sql/fence_schema.sql; idempotent, upgrades an installed fence keeping its
  // records; also run by `fencelock migrate`). install() runs it on `conn`, whose role then
  // owns the fence. The functions are SECURITY DEFINER with a pinned search_path; the table and
  // EXECUTE are revoked from PUBLIC: grant writers EXECUTE only (GRANT EXECUTE ON FUNCTION
  // fencelock_fence(text, numeric, text) TO role), so that none can lower a token.
  static std::string_view schema_sql();
  static Status install(PGconn* conn);
  // Runs SELECT fencelock_fence(resource, token, issuer) on `conn`, which must be inside the
  // caller's transaction (BEGIN ... this ... the reads and the write ... COMMIT). OK: the write
  // may proceed and the fence row stays locked until the transaction ends. kFenced: stale, or
  // the record belongs to another lock (fence.h; the transaction is now aborted: ROLLBACK).
  // kInvalidArgument, without running anything, when `conn` is not idle inside a transaction:
  // in autocommit the row would be unlocked when the statement ends and the check would protect
  // nothing; and (the transaction aborted) for an issuer Lease::fencing() cannot return.
  // kAborted under REPEATABLE READ or SERIALIZABLE when a concurrent holder's transaction
  // committed first (SQLSTATE 40001/40P01): roll back and retry the whole transaction.
  // kPermissionDenied when the role lacks EXECUTE on the fence. kInternal when the record holds
  // no token (written by an older version that accepted NaN: the message says how to repair
  // it). kUnavailable / kInternal for other failures.
  // A savepoint that swallows the error (psql's ON_ERROR_ROLLBACK) defeats the fence.
  static Status check(PGconn* conn, std::string_view resource, const Fencing& fencing);
  // A bare token: the two-argument fencelock_fence(resource, token) (fence.h: an unnamed token).
  static Status check(PGconn* conn, std::string_view resource, FencingToken token);
};

}  // namespace fencelock

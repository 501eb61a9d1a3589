// PostgresFence (fencelock/fence.h): runs fence_schema.sql and fencelock_fence() on the caller's
// own libpq connection (blocking PQexecParams: the caller's connection, the caller's thread).
#include <libpq-fe.h>

#include <cstring>

#include <fmt/format.h>

#include "fencelock/fence.h"
#include "fencelock/postgres_fence.h"
#include "postgres_sql.h"

namespace fencelock {

namespace {

// `function`: the fence function the statement called, named in the GRANT a writer lacks.
Status failure(PGconn* conn, PGresult* result, std::string_view what,
               std::string_view function = "fencelock_fence(text, numeric, text)") {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const char* primary =
      result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  std::string message = primary != nullptr ? primary : PQerrorMessage(conn);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  // FL001 stale, FL003 another lock's token: the message is the refusal (fence_schema.sql).
  if (state != nullptr && (std::strcmp(state, "FL001") == 0 || std::strcmp(state, "FL003") == 0)) {
    return Status(Code::kFenced, message);
  }
  if (state != nullptr && std::strcmp(state, "FL002") == 0) {  // not a token or an issuer
    return Status(Code::kInvalidArgument, fmt::format("postgres {}: {}", what, message));
  }
  if (state != nullptr && std::strcmp(state, "FL004") == 0) {  // a record that holds no token
    return Status(Code::kInternal, fmt::format("postgres {}: {}", what, message));
  }
  // Serialization failure and deadlock: the transaction is aborted; the retry is the caller's
  // (under REPEATABLE READ a holder that waited for an older holder's commit lands here).
  if (state != nullptr && (std::strcmp(state, "40001") == 0 || std::strcmp(state, "40P01") == 0)) {
    return Status(Code::kAborted,
                  fmt::format("postgres {}: {} (SQLSTATE {}); roll back and retry the whole "
                              "transaction",
                              what, message, state));
  }
  if (state != nullptr && std::strcmp(state, "42501") == 0) {  // insufficient_privilege
    return Status(
        Code::kPermissionDenied,
        fmt::format("postgres {}: {}; {}", what, message,
                    what == "fence" ? fmt::format("writers need EXECUTE on the fence: GRANT "
                                                  "EXECUTE ON FUNCTION {} TO <role> (as its owner)",
                                                  function)
                                    : "the fence belongs to another role: install it as that role, "
                                      "or have an administrator check who owns it"));
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    return Status(Code::kUnavailable, fmt::format("postgres {}: {}", what, message));
  }
  return Status(Code::kInternal, fmt::format("postgres {}: {}", what, message));
}

}  // namespace

std::string_view PostgresFence::schema_sql() { return detail::postgres::sql::fence_schema; }

Status PostgresFence::install(PGconn* conn) {
  PGresult* result = PQexec(conn, std::string(schema_sql()).c_str());
  Status status = PQresultStatus(result) == PGRES_COMMAND_OK
                      ? Status::Ok()
                      : failure(conn, result, "fence schema");
  PQclear(result);
  return status;
}

Status PostgresFence::check(PGconn* conn, std::string_view resource, FencingToken token) {
  return check(conn, resource, Fencing{token, ""});
}

Status PostgresFence::check(PGconn* conn, std::string_view resource, const Fencing& fencing) {
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      break;
    case PQTRANS_IDLE:
      return Status(Code::kInvalidArgument,
                    "PostgresFence::check needs an open transaction (BEGIN first, then the "
                    "check, the reads and the write, then COMMIT): in autocommit the fence row is "
                    "unlocked when the statement ends, so a concurrent holder could write between "
                    "the check and the write");
    case PQTRANS_INERROR:
      return Status(Code::kInvalidArgument,
                    "PostgresFence::check: the transaction has already failed; ROLLBACK and "
                    "start again");
    case PQTRANS_UNKNOWN:
      return Status(Code::kUnavailable, "postgres fence: the connection is broken");
    case PQTRANS_ACTIVE:
      return Status(Code::kInvalidArgument,
                    "PostgresFence::check: the connection is busy with another command");
  }
  // The issuer is checked by the function (FL002), the one place for the rule on PostgreSQL. A
  // bare token calls the two-argument form, so writers granted only that one keep working.
  const std::string name(resource), value = std::to_string(fencing.token.value());
  const char* params[] = {name.c_str(), value.c_str(), fencing.issuer.c_str()};
  const bool named = !fencing.issuer.empty();
  PGresult* result = PQexecParams(conn,
                                  named ? "SELECT fencelock_fence($1, $2::numeric, $3)"
                                        : "SELECT fencelock_fence($1, $2::numeric)",
                                  named ? 3 : 2, nullptr, params, nullptr, nullptr, 0);
  Status status = PQresultStatus(result) == PGRES_TUPLES_OK
                      ? Status::Ok()
                      : failure(conn, result, "fence",
                                named ? "fencelock_fence(text, numeric, text)"
                                      : "fencelock_fence(text, numeric)");
  PQclear(result);
  return status;
}

}  // namespace fencelock

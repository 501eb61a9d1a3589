// PostgresFence (fencelock/fence.h): runs fence_schema.sql and fencelock_fence() on the caller's
// own libpq connection (blocking PQexecParams: the caller's connection, the caller's thread).
#include <libpq-fe.h>

#include <cstring>

#include <fmt/format.h>

#include "fencelock/fence.h"
#include "postgres_sql.h"

namespace fencelock {

namespace {

Status failure(PGconn* conn, PGresult* result, std::string_view what) {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const char* primary =
      result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  std::string message = primary != nullptr ? primary : PQerrorMessage(conn);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (state != nullptr && std::strcmp(state, "FL001") == 0) {
    return Status(Code::kFenced, message);
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    return Status(Code::kUnavailable, fmt::format("postgres {}: {}", what, message));
  }
  return Status(Code::kInternal, fmt::format("postgres {}: {}", what, message));
}

}  // namespace

std::string_view PostgresFence::schema_sql() { return detail::postgres::sql::fence_schema; }

Status PostgresFence::install(pg_conn* conn) {
  PGresult* result = PQexec(conn, std::string(schema_sql()).c_str());
  Status status = PQresultStatus(result) == PGRES_COMMAND_OK ? Status::Ok()
                                                             : failure(conn, result, "fence schema");
  PQclear(result);
  return status;
}

Status PostgresFence::check(pg_conn* conn, std::string_view resource, FencingToken token) {
  const std::string name(resource), value = std::to_string(token.value());
  const char* params[] = {name.c_str(), value.c_str()};
  PGresult* result = PQexecParams(conn, "SELECT fencelock_fence($1, $2::numeric)", 2, nullptr,
                                  params, nullptr, nullptr, 0);
  Status status = PQresultStatus(result) == PGRES_TUPLES_OK ? Status::Ok()
                                                            : failure(conn, result, "fence");
  PQclear(result);
  return status;
}

}  // namespace fencelock

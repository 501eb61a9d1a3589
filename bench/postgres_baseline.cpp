#include "postgres_baseline.h"

#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "postgres_sql.h"

namespace fencelock::bench {

namespace sql = detail::postgres::sql;

PostgresBaseline::PostgresBaseline(const std::string& conninfo, bool advisory)
    : advisory_(advisory), conn_(PQconnectdb(conninfo.c_str())) {
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string why = PQerrorMessage(conn_);
    PQfinish(conn_);
    throw std::runtime_error("baseline cannot connect to PostgreSQL: " + why);
  }
}

PostgresBaseline::~PostgresBaseline() { PQfinish(conn_); }

bool PostgresBaseline::cycle(const std::string& key) {
  std::string owner = fmt::format("{:032x}", ++counter_);
  if (advisory_) {
    // The floor of an advisory lock: PostgreSQL's own lock and unlock and nothing else (no token,
    // no holder note), as a program using advisory locks directly would run them.
    const char* params[] = {key.c_str()};
    PGresult* r = PQexecParams(conn_, "SELECT pg_advisory_lock(hashtext($1))", 1, nullptr, params,
                               nullptr, nullptr, 0);
    bool granted = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    r = PQexecParams(conn_, "SELECT pg_advisory_unlock(hashtext($1))", 1, nullptr, params, nullptr,
                     nullptr, 0);
    granted = granted && PQresultStatus(r) == PGRES_TUPLES_OK &&
              std::string_view(PQgetvalue(r, 0, 0)) == "t";
    PQclear(r);
    return granted;
  }
  // The owner id is fresh per cycle, so it serves as the run id too. The key's row exists after
  // the first cycle (a first run inserts it and grants nothing: token 0, run again).
  const char* acquire_params[] = {key.c_str(), owner.c_str(), "10000", "{}", owner.c_str()};
  bool granted = false;
  for (int run = 0; run < 2 && !granted; ++run) {
    PGresult* r = PQexecParams(conn_, std::string(sql::lease_acquire).c_str(), 5, nullptr,
                               acquire_params, nullptr, nullptr, 0);
    const bool answered = PQresultStatus(r) == PGRES_TUPLES_OK && !PQgetisnull(r, 0, 0);
    const bool placeholder = answered && std::string_view(PQgetvalue(r, 0, 0)) == "0";
    granted = answered && !placeholder;
    PQclear(r);
    if (!placeholder) break;
  }
  PGresult* r;
  const char* release_params[] = {key.c_str(), owner.c_str()};
  r = PQexecParams(conn_, std::string(sql::lease_release).c_str(), 2, nullptr, release_params,
                   nullptr, nullptr, 0);
  PQclear(r);
  return granted;
}

}  // namespace fencelock::bench

// The bare-libpq baseline for PostgreSQL on one connection with PQexecParams, and nothing else.
// Lease mode: the same two statements per cycle as fencelock (lease_acquire.sql,
// lease_release.sql). Advisory mode: the floor of the mechanism, `SELECT
// pg_advisory_lock(hashtext($1))` and `SELECT pg_advisory_unlock(hashtext($1))` (no token, no
// holder note: what fencelock adds must cost no more than it saves).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <string>

namespace fencelock::bench {

class PostgresBaseline {
 public:
  // `conninfo`: a libpq URI without fencelock's parameters. Throws std::runtime_error when it
  // cannot connect or the schema is missing (run fencelock once, or `fencelock migrate`).
  PostgresBaseline(const std::string& conninfo, bool advisory);
  ~PostgresBaseline();
  PostgresBaseline(const PostgresBaseline&) = delete;
  PostgresBaseline& operator=(const PostgresBaseline&) = delete;

  bool cycle(const std::string& key);

 private:
  bool advisory_;
  PGconn* conn_ = nullptr;
  std::uint64_t counter_ = 0;
};

}  // namespace fencelock::bench

// Backend harnesses for the conformance suite: one per backend, each giving a fresh, isolated
// lock service per test and the few server-side observations the suite needs.
//
// A new backend joins both suites (conformance_test.cpp, async_conformance_test.cpp) by adding a
// harness here and its tag to AllBackends below; the test cases do not change.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "fencelock/client.h"

namespace fencelock::testing {

class Harness {
 public:
  virtual ~Harness() = default;
  // URI of this test's own lock service.
  virtual std::string uri() = 0;
  // Lock-acquisition attempts the server(s) received for `key` so far (each instance counted
  // once per attempt; an upper bound is fine as long as polling would exceed it).
  virtual long long acquire_attempts(const std::string& key) = 0;
  // Waiters the server currently knows about for `key` (queue places, watches, listeners).
  virtual long long server_waiters(const std::string& key) = 0;
  // A short TTL the backend accepts, for tests that wait for expiry or renewal.
  virtual std::chrono::milliseconds short_ttl() const { return std::chrono::milliseconds(300); }

  // Makes `holder` unable to keep its lease on `key`, as a long GC pause or a partition would.
  // Default: its renewals stop. A backend without TTL (PostgreSQL advisory) ends its session.
  virtual void cut_off(Client& holder, const std::string& key);
  // Called after a holder vanished without releasing (its lease dropped, release_timeout 0): what
  // a crash does beyond that. Default: nothing (the TTL frees the key). PostgreSQL advisory:
  // the crashed process's session ends.
  virtual void crashed(const std::string& key) { (void)key; }
  // Whether valid_until() bounds when another client can be granted. False for PostgreSQL
  // advisory locks: an ended session frees the lock at once, so lost() can only follow (within
  // the health-check interval) and fencing tokens carry safety (the contract in docs/PROTOCOLS.md).
  virtual bool validity_bounds_exclusion() const { return true; }
};

std::unique_ptr<Harness> make_memory_harness();
std::unique_ptr<Harness> make_redis_harness();           // one redis-server
std::unique_ptr<Harness> make_redlock_harness();         // three independent redis-servers
std::unique_ptr<Harness> make_postgres_lease_harness();  // one PostgreSQL 15 server, mode=lease
std::unique_ptr<Harness>
make_postgres_advisory_harness();              // one PostgreSQL 15 server, mode=advisory
std::unique_ptr<Harness> make_etcd_harness();  // a three-member etcd 3.4 cluster

struct MemoryBackendTag {
  static std::unique_ptr<Harness> make() { return make_memory_harness(); }
};
struct RedisBackendTag {
  static std::unique_ptr<Harness> make() { return make_redis_harness(); }
};
struct RedlockBackendTag {
  static std::unique_ptr<Harness> make() { return make_redlock_harness(); }
};
struct PostgresLeaseBackendTag {
  static std::unique_ptr<Harness> make() { return make_postgres_lease_harness(); }
};
struct PostgresAdvisoryBackendTag {
  static std::unique_ptr<Harness> make() { return make_postgres_advisory_harness(); }
};
struct EtcdBackendTag {
  static std::unique_ptr<Harness> make() { return make_etcd_harness(); }
};

// A backend driven through the asynchronous API (Client::acquire_future, Lease::release_async):
// the conformance suite runs every case through both.
template <typename Tag>
struct AsyncApi {
  using Backend = Tag;
  static std::unique_ptr<Harness> make() { return Tag::make(); }
};
template <typename T>
inline constexpr bool kAsyncApi = false;
template <typename Tag>
inline constexpr bool kAsyncApi<AsyncApi<Tag>> = true;
// The backend tag of a suite's type parameter, whichever API it runs through.
template <typename T>
struct BackendOfT {
  using type = T;
};
template <typename Tag>
struct BackendOfT<AsyncApi<Tag>> {
  using type = Tag;
};
template <typename T>
using BackendOf = typename BackendOfT<T>::type;

// Every backend, for TYPED_TEST_SUITE, with the names the suites print.
using AllBackends =
    ::testing::Types<MemoryBackendTag, RedisBackendTag, RedlockBackendTag, PostgresLeaseBackendTag,
                     PostgresAdvisoryBackendTag, EtcdBackendTag>;
// Every backend through each API: "redis" the blocking one, "redis_async" the asynchronous one.
using AllBackendsBothApis =
    ::testing::Types<MemoryBackendTag, RedisBackendTag, RedlockBackendTag, PostgresLeaseBackendTag,
                     PostgresAdvisoryBackendTag, EtcdBackendTag, AsyncApi<MemoryBackendTag>,
                     AsyncApi<RedisBackendTag>, AsyncApi<RedlockBackendTag>,
                     AsyncApi<PostgresLeaseBackendTag>, AsyncApi<PostgresAdvisoryBackendTag>,
                     AsyncApi<EtcdBackendTag>>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    if constexpr (kAsyncApi<T>) {
      return name_of<typename T::Backend>() + "_async";
    } else {
      return name_of<T>();
    }
  }

 private:
  template <typename T>
  static std::string name_of() {
    if (std::is_same_v<T, MemoryBackendTag>) return "memory";
    if (std::is_same_v<T, RedisBackendTag>) return "redis";
    if (std::is_same_v<T, RedlockBackendTag>) return "redlock";
    if (std::is_same_v<T, PostgresLeaseBackendTag>) return "postgres_lease";
    if (std::is_same_v<T, PostgresAdvisoryBackendTag>) return "postgres_advisory";
    if (std::is_same_v<T, EtcdBackendTag>) return "etcd";
    return "unknown";
  }
};

}  // namespace fencelock::testing

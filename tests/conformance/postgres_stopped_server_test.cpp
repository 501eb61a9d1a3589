// A PostgreSQL server that stops answering (every process SIGSTOPped: the kernel still accepts
// connections and bytes) bounds every call by its own deadline: a release, a Lease destroyed
// with a release_timeout and a try each return within about their time, in both modes. Before,
// the cancel request after a timed-out statement (PQcancel) waited for the stopped server to
// close the cancel connection: release() blocked until the server resumed (628 s seen).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "fencelock/client.h"
#include "support/postgres_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;

class PostgresStoppedServer : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { server_ = PostgresServer::start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void TearDown() override { server_->resume(); }

  std::string uri() const { return server_->uri() + "?mode=" + GetParam(); }

  // Runs `call` on a thread; the server is resumed after 60 s at the latest, so that a call
  // that waits for it returns and the test fails instead of hanging.
  template <typename Call>
  auto bounded(Call call) {
    auto outcome = std::async(std::launch::async, call);
    const bool returned = outcome.wait_for(60s) == std::future_status::ready;
    server_->resume();
    EXPECT_TRUE(returned) << "the call was still waiting after 60 s on a stopped server";
    return outcome.get();
  }

  static PostgresServer* server_;
};

PostgresServer* PostgresStoppedServer::server_ = nullptr;

ClientOptions short_io() {
  ClientOptions options;
  options.io_timeout = 1s;
  options.connect_timeout = 1s;
  return options;
}

TEST_P(PostgresStoppedServer, AReleaseReturnsWithinItsTimeAndSaysItDidNotRelease) {
  auto client = Client::connect(uri(), short_io());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make("stopped/release"), {.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  server_->pause();
  const Status released = bounded([&] { return lease->release(); });
  EXPECT_FALSE(released.ok()) << "a stopped server cannot have released it";
}

TEST_P(PostgresStoppedServer, ATryReturnsWithinItsIoTimeout) {
  auto client = Client::connect(uri(), short_io());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  // A connection to reuse, so the try runs a statement rather than a connect.
  auto warm = client->acquire(*LockKey::make("stopped/warm"), {.ttl = 30s});
  ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  ASSERT_TRUE(warm->release().ok());
  server_->pause();
  auto tried =
      bounded([&] { return client->acquire(*LockKey::make("stopped/try"), {.ttl = 30s}); });
  EXPECT_FALSE(tried.ok());
}

TEST_P(PostgresStoppedServer, ALeaseDestroyedWithAReleaseTimeoutReturns) {
  auto client = Client::connect(uri(), short_io());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  // ClientOptions::release_timeout: 500 ms by default.
  auto lease = client->acquire(*LockKey::make("stopped/destroyed"), {.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  server_->pause();
  const bool destroyed = bounded([&] {
    Lease gone = std::move(*lease);
    return true;  // ~Lease ran when `gone` left this scope
  });
  EXPECT_TRUE(destroyed);
}

INSTANTIATE_TEST_SUITE_P(Modes, PostgresStoppedServer, ::testing::Values("advisory", "lease"));

}  // namespace
}  // namespace fencelock::testing

// The adapters over Client::acquire_async (on memory://, in process): the C++20 awaitables of
// fencelock/coro.h resume the coroutine with the outcome on a fencelock thread, and
// fencelock/asio.h completes on the handler's executor (an io_context's thread, a future) with
// any Asio completion token.
#include <gtest/gtest.h>

#include <chrono>
#include <coroutine>
#include <exception>
#include <future>
#include <optional>
#include <thread>

#include "fencelock/client.h"
#include "fencelock/coro.h"

#ifdef FENCELOCK_TEST_ASIO
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include "fencelock/asio.h"
#endif

namespace fencelock {
namespace {

using namespace std::chrono_literals;

// The smallest coroutine type: starts at once, nobody awaits it.
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

struct Seen {
  Status acquired;
  std::uint64_t token = 0;
  Status released;
  std::thread::id resumed_on;
};

Detached take_and_release(Client& client, LockKey key, AcquireOptions options,
                          std::promise<Seen>& out) {
  Seen seen;
  Result<Lease> lease = co_await async_acquire(client, key, options);
  seen.resumed_on = std::this_thread::get_id();
  seen.acquired = lease.status();
  if (lease.ok()) {
    seen.token = lease->token().value();
    seen.released = co_await async_release(*lease);
  }
  out.set_value(seen);
}

Client connect(const char* name) {
  auto client = Client::connect(std::string("memory://") + name);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

TEST(CoroAdapter, ACoroutineAcquiresAndReleasesResumingOnAFencelockThread) {
  Client client = connect("coro-basic");
  auto key = *LockKey::make("coro/basic");
  std::promise<Seen> out;
  take_and_release(client, key, {.ttl = 5s}, out);
  Seen seen = out.get_future().get();
  ASSERT_TRUE(seen.acquired.ok()) << seen.acquired.to_string();
  EXPECT_GT(seen.token, 0u);
  EXPECT_TRUE(seen.released.ok()) << seen.released.to_string();
  EXPECT_NE(seen.resumed_on, std::this_thread::get_id());
  auto holder = client.inspect(key);
  ASSERT_TRUE(holder.ok());
  EXPECT_FALSE(holder->has_value()) << "the awaited release did not free the key";
}

TEST(CoroAdapter, ASuspendedCoroutineIsResumedByTheHoldersRelease) {
  Client holder = connect("coro-wait"), waiter = connect("coro-wait");
  auto key = *LockKey::make("coro/wait");
  auto held = holder.acquire(key, {.ttl = 30s});
  ASSERT_TRUE(held.ok());
  std::promise<Seen> out;
  auto result = out.get_future();
  take_and_release(waiter, key, {.ttl = 5s, .wait = 30s}, out);
  EXPECT_EQ(result.wait_for(0s), std::future_status::timeout) << "resumed while the key was held";
  ASSERT_TRUE(held->release().ok());
  Seen seen = result.get();
  ASSERT_TRUE(seen.acquired.ok()) << seen.acquired.to_string();
  EXPECT_GT(seen.token, held->token().value());
}

#ifdef FENCELOCK_TEST_ASIO

TEST(AsioAdapter, ACallbackBoundToAnIoContextRunsOnTheThreadThatRunsIt) {
  Client client = connect("asio-callback");
  asio::io_context io;
  std::optional<Result<Lease>> got;
  std::thread::id ran_on;
  async_acquire(client, *LockKey::make("asio/callback"), {.ttl = 5s},
                asio::bind_executor(io, [&](Result<Lease> lease) {
                  ran_on = std::this_thread::get_id();
                  got.emplace(std::move(lease));
                }));
  // run() returns only once the handler ran: the pending acquisition counts as work.
  io.run();
  ASSERT_TRUE(got.has_value()) << "io_context::run returned before the acquisition completed";
  ASSERT_TRUE(got->ok()) << got->status().to_string();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(AsioAdapter, UseAwaitableAcquiresAndReleasesInAnAsioCoroutine) {
  Client client = connect("asio-awaitable");
  auto key = *LockKey::make("asio/awaitable");
  asio::io_context io;
  Seen seen;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // A named variable, not a braced temporary: g++ 12 destroys a temporary aggregate with
        // a std::string member inside a co_await expression wrongly (free(): invalid pointer).
        const AcquireOptions options{.ttl = 5s};
        Result<Lease> lease = co_await async_acquire(client, key, options, asio::use_awaitable);
        seen.resumed_on = std::this_thread::get_id();
        seen.acquired = lease.status();
        if (lease.ok()) {
          seen.token = lease->token().value();
          seen.released = co_await async_release(*lease, asio::use_awaitable);
        }
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(seen.acquired.ok()) << seen.acquired.to_string();
  EXPECT_GT(seen.token, 0u);
  EXPECT_TRUE(seen.released.ok()) << seen.released.to_string();
  EXPECT_EQ(seen.resumed_on, std::this_thread::get_id()) << "resumed off the io_context";
  auto holder = client.inspect(key);
  ASSERT_TRUE(holder.ok());
  EXPECT_FALSE(holder->has_value());
}

TEST(AsioAdapter, UseFutureDeliversTheOutcome) {
  Client client = connect("asio-future");
  auto key = *LockKey::make("asio/future");
  auto held = client.acquire(key, {.ttl = 30s});
  ASSERT_TRUE(held.ok());
  std::future<Result<Lease>> waited =
      async_acquire(client, key, {.ttl = 5s, .wait = 100ms}, asio::use_future);
  Result<Lease> lease = waited.get();
  EXPECT_EQ(lease.code(), Code::kLocked) << lease.status().to_string();
}

TEST(AsioAdapter, AnEmittedCancellationSlotCancelsAPendingAcquisition) {
  Client holder = connect("asio-cancel"), waiter = connect("asio-cancel");
  auto key = *LockKey::make("asio/cancel");
  auto held = holder.acquire(key, {.ttl = 30s});
  ASSERT_TRUE(held.ok());
  asio::io_context io;
  asio::cancellation_signal cancel;
  std::optional<Result<Lease>> got;
  async_acquire(
      waiter, key, {.ttl = 5s, .wait = 60s},
      asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(io, [&](Result<Lease> lease) {
                                     got.emplace(std::move(lease));
                                   })));
  cancel.emit(asio::cancellation_type::terminal);
  io.run();  // returns once the handler ran
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), Code::kCancelled) << got->status().to_string();
  ASSERT_TRUE(held->release().ok());
  auto holder_now = holder.inspect(key);
  ASSERT_TRUE(holder_now.ok());
  EXPECT_FALSE(holder_now->has_value()) << "the cancelled acquisition left the key held";
}

#endif  // FENCELOCK_TEST_ASIO

}  // namespace
}  // namespace fencelock

// fencelock/coro.h: acquire and release from a C++20 coroutine, standard library only.
//
// clang-format off
//   const fencelock::AcquireOptions options{.ttl = 10s, .wait = 30s};
//   fencelock::Result<fencelock::Lease> lease =
//       co_await fencelock::async_acquire(client, key, options);
//   if (lease) { write_with_fence(lease->token()); co_await fencelock::async_release(*lease); }
// clang-format on
//
// The awaiting coroutine is suspended (no thread waits for it) and resumes on a fencelock thread
// (its Client's engine, see Client::acquire_async) with what acquire() or release() would have
// returned. That thread serves the Client's other asynchronous calls: a coroutine that has long
// work to do after the await should move to an executor of its own first. The awaitables work
// with any coroutine type (a task library, asio::awaitable through fencelock/asio.h, your own).
//
// With g++ 12, pass AcquireOptions as a named variable rather than a braced temporary inside a
// co_await expression: that compiler destroys such a temporary (an aggregate with a std::string)
// wrongly, and the program aborts (free(): invalid pointer); clang 14 is fine.
//
// Thread-safety: as Client::acquire_async and Lease::release_async.
#pragma once

#include <coroutine>
#include <optional>
#include <utility>

#include "fencelock/client.h"
#include "fencelock/lease.h"

namespace fencelock {

// co_await async_acquire(client, key, options): Result<Lease>. `client` must outlive the
// co_await's start only; destroying the last copy of it cancels the acquisition (kCancelled).
class AcquireAwaitable {
 public:
  AcquireAwaitable(Client& client, LockKey key, AcquireOptions options)
      : client_(client), key_(std::move(key)), options_(std::move(options)) {}

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> awaiting) {
    client_.acquire_async(key_, options_, [this, awaiting](Result<Lease> lease) {
      result_.emplace(std::move(lease));
      awaiting.resume();
    });
  }
  Result<Lease> await_resume() { return std::move(*result_); }

 private:
  Client& client_;
  LockKey key_;
  AcquireOptions options_;
  std::optional<Result<Lease>> result_;
};

inline AcquireAwaitable async_acquire(Client& client, const LockKey& key,
                                      AcquireOptions options = {}) {
  return AcquireAwaitable(client, key, std::move(options));
}

// co_await async_release(lease): Status, as Lease::release().
class ReleaseAwaitable {
 public:
  explicit ReleaseAwaitable(Lease& lease) : lease_(lease) {}

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> awaiting) {
    lease_.release_async([this, awaiting](Status status) {
      result_.emplace(std::move(status));
      awaiting.resume();
    });
  }
  Status await_resume() { return std::move(*result_); }

 private:
  Lease& lease_;
  std::optional<Status> result_;
};

inline ReleaseAwaitable async_release(Lease& lease) { return ReleaseAwaitable(lease); }

}  // namespace fencelock

// fencelock/asio.h: acquire and release with standalone Asio's completion tokens. Header-only
// and optional: include it only in programs built with Asio (Debian: libasio-dev).
//
// clang-format off
//   // in an asio::awaitable<void> coroutine:
//   const fencelock::AcquireOptions options{.ttl = 10s, .wait = 30s};
//   fencelock::Result<fencelock::Lease> lease =
//       co_await fencelock::async_acquire(client, key, options, asio::use_awaitable);
//   // with a callback, run on the callback's associated executor (a strand, an io_context):
//   fencelock::async_acquire(client, key, options, asio::bind_executor(strand,
//       [](fencelock::Result<fencelock::Lease> lease) { ... }));
//   // or a std::future: fencelock::async_acquire(client, key, options, asio::use_future)
// clang-format on
//
// Completion signature: void(Result<Lease>) for async_acquire, void(Status) for async_release.
// The completion handler runs on its associated executor (the system executor when it has none),
// never on a fencelock thread and never inside the initiating call; until then the executor
// counts outstanding work, so io_context::run() does not return while an acquisition is
// pending. The contract is Client::acquire_async's and Lease::release_async's.
//
// With g++ 12, pass AcquireOptions as a named variable rather than a braced temporary inside a
// co_await expression: that compiler destroys such a temporary (an aggregate with a std::string)
// wrongly, and the program aborts (free(): invalid pointer); clang 14 is fine.
//
// Thread-safety: as Client::acquire_async and Lease::release_async.
#pragma once

#include <memory>
#include <stop_token>
#include <utility>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

#include "fencelock/client.h"
#include "fencelock/lease.h"

namespace fencelock {
namespace asio_detail {

// Calls `handler` with `value` on the handler's associated executor, keeping that executor busy
// until then. Returns the callback a fencelock completion runs.
template <typename Value, typename Handler>
auto complete_on_executor(Handler handler) {
  auto work = ::asio::make_work_guard(::asio::get_associated_executor(handler));
  using Pending = std::pair<Handler, decltype(work)>;
  // std::function needs a copyable callable: the move-only handler lives behind a shared_ptr.
  auto pending = std::make_shared<Pending>(std::move(handler), std::move(work));
  return [pending](Value value) {
    // A second claim on the executor's work, dropped only once post() has returned on this
    // thread: otherwise the handler may run, io_context::run() return and the io_context be
    // destroyed while post() is still waking the io_context's thread (TSan saw it).
    auto posting = ::asio::make_work_guard(pending->second.get_executor());
    ::asio::post(posting.get_executor(), [pending, value = std::move(value)]() mutable {
      Handler to_call = std::move(pending->first);
      pending->second.reset();
      // The operation is over: a cancellation handler installed for it goes (Asio's rule).
      auto slot = ::asio::get_associated_cancellation_slot(to_call);
      if (slot.is_connected()) slot.clear();
      std::move(to_call)(std::move(value));
    });
  };
}

// One acquisition's stop: requested by the caller's options.stop or by the handler's
// cancellation slot.
struct StopLink {
  struct Forward {
    std::stop_source* to;
    void operator()() const { to->request_stop(); }
  };
  explicit StopLink(const std::stop_token& outer) : follow(outer, Forward{&source}) {}
  std::stop_source source;
  std::stop_callback<Forward> follow;  // after `source`: goes first
};

}  // namespace asio_detail

// Client::acquire_async with an Asio completion token; signature void(Result<Lease>).
template <typename CompletionToken>
auto async_acquire(Client& client, const LockKey& key, const AcquireOptions& options,
                   CompletionToken&& token) {
  return ::asio::async_initiate<CompletionToken, void(Result<Lease>)>(
      [&client](auto handler, const LockKey& what, const AcquireOptions& how) {
        auto slot = ::asio::get_associated_cancellation_slot(handler);
        if (!slot.is_connected()) {
          client.acquire_async(
              what, how, asio_detail::complete_on_executor<Result<Lease>>(std::move(handler)));
          return;
        }
        auto link = std::make_shared<asio_detail::StopLink>(how.stop);
        AcquireOptions linked = how;
        linked.stop = link->source.get_token();
        // Emitted on the handler's executor; a stop_source may be requested from any thread.
        // The completion clears the slot (complete_on_executor), which drops this handler.
        slot.assign([link](::asio::cancellation_type) { link->source.request_stop(); });
        client.acquire_async(what, linked,
                             asio_detail::complete_on_executor<Result<Lease>>(std::move(handler)));
      },
      token, key, options);
}

// Lease::release_async with an Asio completion token; signature void(Status).
template <typename CompletionToken>
auto async_release(Lease& lease, CompletionToken&& token) {
  return ::asio::async_initiate<CompletionToken, void(Status)>(
      [&lease](auto handler) {
        lease.release_async(asio_detail::complete_on_executor<Status>(std::move(handler)));
      },
      token);
}

}  // namespace fencelock

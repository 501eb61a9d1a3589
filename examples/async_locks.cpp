// A complete program: many acquisitions pending at once without a thread each, then the same
// with a C++20 coroutine.
//
//   async_locks [URI] [COUNT]     (defaults: memory://example, 100)
//
// COUNT acquisitions on distinct keys go out together (acquire_async); each completion, on a
// fencelock thread, releases its lease without blocking (release_async). The program waits for
// them with a counter, then takes one more lock from a coroutine (fencelock/coro.h).
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdlib>
#include <exception>
#include <future>
#include <iostream>
#include <mutex>
#include <string>

#include "fencelock/client.h"
#include "fencelock/coro.h"

namespace {

// Counts completions; the main thread waits for all of them.
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void done(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ += ok ? 0 : 1;
    if (--left_ == 0) all_done_.notify_all();
  }
  int wait() {
    std::unique_lock<std::mutex> lock(mu_);
    all_done_.wait(lock, [&] { return left_ == 0; });
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable all_done_;
  int left_;
  int failed_ = 0;
};

// A coroutine type that starts at once and reports its end through a promise.
struct Task {
  struct promise_type {
    Task get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

Task take_once(fencelock::Client& client, fencelock::LockKey key, std::promise<int>& exit_code) {
  using namespace std::chrono_literals;
  const fencelock::AcquireOptions options{.ttl = 5s, .wait = 10s};
  fencelock::Result<fencelock::Lease> lease =
      co_await fencelock::async_acquire(client, key, options);
  if (!lease) {
    std::cerr << "coroutine: not acquired: " << lease.status().to_string() << "\n";
    exit_code.set_value(69);
    co_return;
  }
  std::cout << "coroutine: holding " << lease->key().str() << " with fencing token "
            << lease->token().value() << "\n";
  fencelock::Status released = co_await fencelock::async_release(*lease);
  std::cout << "coroutine: released: " << released.to_string() << "\n";
  exit_code.set_value(released.ok() ? 0 : 69);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const char* uri = argc > 1 ? argv[1] : "memory://example";
  const int count = argc > 2 ? std::atoi(argv[2]) : 100;
  if (count <= 0) {
    std::cerr << "COUNT must be a positive number\n";
    return 64;
  }
  auto client = fencelock::Client::connect(uri);
  if (!client) {
    std::cerr << "cannot connect: " << client.status().to_string() << "\n";
    return 69;
  }

  Countdown pending(count);
  for (int i = 0; i < count; ++i) {
    auto key = fencelock::LockKey::make("example/async/" + std::to_string(i));
    client->acquire_async(
        *key, {.ttl = 5s, .wait = 10s}, [&pending](fencelock::Result<fencelock::Lease> lease) {
          if (!lease) {
            std::cerr << "not acquired: " << lease.status().to_string() << "\n";
            return pending.done(false);
          }
          // Short work only: this runs on a thread the Client's other completions share.
          lease->release_async(
              [&pending](const fencelock::Status& released) { pending.done(released.ok()); });
        });
  }
  const int failed = pending.wait();
  std::cout << count - failed << " of " << count << " locks taken and released asynchronously\n";
  if (failed > 0) return 69;

  std::promise<int> exit_code;
  take_once(*client, *fencelock::LockKey::make("example/coroutine"), exit_code);
  return exit_code.get_future().get();
}

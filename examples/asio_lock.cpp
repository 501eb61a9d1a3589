// A complete program: a lock taken and released inside an Asio coroutine (fencelock/asio.h);
// the io_context's one thread runs everything of the program's own.
//
//   asio_lock [URI] [KEY]     (defaults: memory://example, example/asio)
#include <chrono>
#include <exception>
#include <iostream>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include "fencelock/asio.h"
#include "fencelock/client.h"

namespace {

asio::awaitable<void> hold_once(fencelock::Client& client, fencelock::LockKey key, int& exit_code) {
  using namespace std::chrono_literals;
  const fencelock::AcquireOptions options{.ttl = 5s, .wait = 10s};
  fencelock::Result<fencelock::Lease> lease =
      co_await fencelock::async_acquire(client, key, options, asio::use_awaitable);
  if (!lease) {
    std::cerr << "not acquired: " << lease.status().to_string() << "\n";
    exit_code = lease.code() == fencelock::Code::kLocked ? 75 : 69;
    co_return;
  }
  std::cout << "holding " << lease->key().str() << " with fencing token " << lease->token().value()
            << "\n";
  fencelock::Status released = co_await fencelock::async_release(*lease, asio::use_awaitable);
  std::cout << "released: " << released.to_string() << "\n";
  exit_code = released.ok() ? 0 : 69;
}

}  // namespace

int main(int argc, char** argv) try {
  const char* uri = argc > 1 ? argv[1] : "memory://example";
  const char* name = argc > 2 ? argv[2] : "example/asio";
  auto client = fencelock::Client::connect(uri);
  if (!client) {
    std::cerr << "cannot connect: " << client.status().to_string() << "\n";
    return 69;
  }
  auto key = fencelock::LockKey::make(name);
  if (!key) {
    std::cerr << key.status().to_string() << "\n";
    return 64;
  }
  asio::io_context io;
  int exit_code = 70;
  asio::co_spawn(io, hold_once(*client, *key, exit_code), asio::detached);
  io.run();  // returns once the coroutine ended
  return exit_code;
} catch (const std::exception& e) {  // Asio reports its own failures by exception
  std::cerr << "asio: " << e.what() << "\n";
  return 70;
}

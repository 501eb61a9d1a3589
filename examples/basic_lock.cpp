// A complete program: take a lock, do fenced work while it is held, release it.
//
//   basic_lock [URI] [KEY]     (defaults: memory://example, example/job)
//
// With a real backend, run two copies at once: the second waits for the first.
#include <chrono>
#include <iostream>
#include <thread>

#include "fencelock/client.h"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const char* uri = argc > 1 ? argv[1] : "memory://example";
  const char* name = argc > 2 ? argv[2] : "example/job";

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
  auto lease = client->acquire(*key, {.ttl = 5s, .wait = 30s});
  if (!lease) {
    std::cerr << "not acquired: " << lease.status().to_string() << "\n";
    return lease.code() == fencelock::Code::kLocked ? 75 : 69;
  }
  std::cout << "holding " << lease->key().str() << " with fencing token " << lease->token().value()
            << "\n";
  for (int step = 0; step < 3 && !lease->is_lost(); ++step) {
    // Real code passes lease->token() to the resource, which rejects older tokens.
    std::cout << "  step " << step << " under token " << lease->token().value() << "\n";
    std::this_thread::sleep_for(200ms);
  }
  fencelock::Status released = lease->release();
  std::cout << "released: " << released.to_string() << "\n";
  return released.ok() ? 0 : 69;
}

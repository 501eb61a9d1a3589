// fenced_write: take a lock, then write to a resource through a fence, so that a holder that
// lost the lock (paused past its TTL, partitioned) cannot overwrite a newer holder's write.
//
//   fenced_write LOCK_URI RESOURCE_REDIS_URI KEY VALUE
//   fenced_write redlock://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
//       redis://127.0.0.1:7101 reports/latest "report of today"
//
// Exit 0 when written, 75 when the lock is held or the fence refused the write (a newer holder
// wrote), 69 when a server is unreachable.
#include <chrono>
#include <iostream>

#include "fencelock/client.h"
#include "fencelock/fence.h"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc != 5) {
    std::cerr << "usage: fenced_write LOCK_URI RESOURCE_REDIS_URI KEY VALUE\n";
    return 64;
  }
  auto client = fencelock::Client::connect(argv[1]);
  if (!client) {
    std::cerr << client.status().to_string() << "\n";
    return 69;
  }
  auto fence = fencelock::RedisFence::connect(argv[2]);
  if (!fence) {
    std::cerr << fence.status().to_string() << "\n";
    return 69;
  }
  auto key = fencelock::LockKey::make(argv[3]);
  if (!key) {
    std::cerr << key.status().to_string() << "\n";
    return 64;
  }
  auto lease = client->acquire(*key, {.ttl = 10s, .wait = 30s});
  if (!lease) {
    std::cerr << lease.status().to_string() << "\n";
    return lease.code() == fencelock::Code::kLocked ? 75 : 69;
  }
  // ... long work here: if this process is paused past the TTL, another holder may have written
  // meanwhile, with a larger token. The fence decides, at the resource, atomically.
  fencelock::Status wrote = fence->set(fencelock::ResourceKey(argv[3]), argv[4], lease->fencing());
  (void)lease->release();
  if (wrote.code() == fencelock::Code::kFenced) {
    std::cerr << "not written: " << wrote.message() << "\n";  // rejected: stale token N < M
    return 75;
  }
  if (!wrote.ok()) {
    std::cerr << wrote.to_string() << "\n";
    return 69;
  }
  std::cout << "written with token " << lease->token().value() << "\n";
  return 0;
}

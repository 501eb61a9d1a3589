// A program outside the fencelock tree, built against an installed fencelock (find_package or
// pkg-config): takes and releases a lock on the backend named by argv[1] and checks the token.
// Includes every public header (postgres_fence.h needs libpq's include path from the package).
#include <cstdio>

#include "fencelock/client.h"
#include "fencelock/fence.h"
#include "fencelock/postgres_fence.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BACKEND_URI\n", argv[0]);
    return 2;
  }
  auto client = fencelock::Client::connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto key = fencelock::LockKey::make("install-test");
  auto lease = client->acquire(*key, {.ttl = std::chrono::seconds(5)});
  if (!lease.ok() || lease->token().value() == 0) {
    std::fprintf(stderr, "acquire: %s\n", lease.status().to_string().c_str());
    return 1;
  }
  fencelock::FenceGate gate;
  if (!gate.admit(lease->token()).ok() || fencelock::PostgresFence::schema_sql().empty()) {
    std::fprintf(stderr, "fence: the gate refused a fresh token or the fence SQL is missing\n");
    return 1;
  }
  std::printf("token %llu\n", static_cast<unsigned long long>(lease->token().value()));
  return lease->release().ok() ? 0 : 1;
}

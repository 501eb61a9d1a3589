// A program outside the fencelock tree, built against an installed fencelock (find_package or
// pkg-config): takes and releases a lock on the backend named by argv[1] and checks the token.
// Includes every public header of the backends the installed fencelock has (fencelock/config.h;
// postgres_fence.h needs libpq's include path from the package).
//   consumer URI               takes and releases a lock, prints "token N"
//   consumer --refused URI     expects connect() to refuse URI's scheme as unknown (a backend
//                              the installed fencelock was built without), prints "refused"
#include <cstdio>
#include <string>
#include <string_view>

#include "fencelock/client.h"
#include "fencelock/config.h"
#include "fencelock/fence.h"
#if FENCELOCK_HAS_POSTGRES
#include "fencelock/postgres_fence.h"
#endif

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--refused") {
    auto refused = fencelock::Client::connect(argv[2]);
    const std::string text = refused.ok() ? "" : refused.status().to_string();
    if (refused.ok() || text.find("unknown backend scheme") == std::string::npos) {
      std::fprintf(stderr, "connect(%s): expected an unknown scheme, got '%s'\n", argv[2],
                   text.c_str());
      return 1;
    }
    std::printf("refused\n");
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s [--refused] BACKEND_URI\n", argv[0]);
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
  bool fence_sql_missing = false;
#if FENCELOCK_HAS_POSTGRES
  fence_sql_missing = fencelock::PostgresFence::schema_sql().empty();
#endif
  if (!gate.admit(lease->token()).ok() || fence_sql_missing) {
    std::fprintf(stderr, "fence: the gate refused a fresh token or the fence SQL is missing\n");
    return 1;
  }
  std::printf("token %llu\n", static_cast<unsigned long long>(lease->token().value()));
  return lease->release().ok() ? 0 : 1;
}

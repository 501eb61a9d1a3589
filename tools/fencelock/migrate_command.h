// `fencelock migrate`: creates the backend's schema explicitly and prints what it did.
#pragma once

#include <string>

namespace fencelock::cli {

struct MigrateArgs {
  std::string backend;  // --backend; empty: $FENCELOCK_BACKEND, then the default
  bool json = false;
};

// Exit 0 when the schema exists afterwards (whether or not anything had to be created).
int migrate_command(const MigrateArgs& args);

}  // namespace fencelock::cli

// fencelock/migrate.h: create what a backend needs on its servers, explicitly.
//
// Clients create their schema on first use. Deployments whose runtime role has no DDL rights run
// migrate() (or `fencelock migrate --backend URI`) once with a privileged role instead.
// Idempotent: running it again changes nothing.
//
// Thread-safety: a free function; concurrent calls are safe (the server serializes the DDL).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fencelock/options.h"
#include "fencelock/status.h"

namespace fencelock {

// The statements that were run (empty when everything already existed, and for backends that
// need no schema: redis://, redlock://, memory://).
Result<std::vector<std::string>> migrate(std::string_view uri, const ClientOptions& options = {});

}  // namespace fencelock

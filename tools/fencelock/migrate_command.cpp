#include "migrate_command.h"

#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "connect_warnings.h"
#include "exit_codes.h"
#include "fencelock/migrate.h"
#include "reporter.h"

namespace fencelock::cli {

namespace {

// What each kind of role needs on PostgreSQL once migrate has run (docs/PROTOCOLS.md).
constexpr const char* kPostgresGrants =
    "grant each role only what it needs (as the role that ran migrate):\n"
    "  lock clients, advisory mode: GRANT SELECT, INSERT, UPDATE, DELETE ON "
    "fencelock_advisory_holders TO r; GRANT SELECT, INSERT, UPDATE ON fencelock_advisory_epoch, "
    "fencelock_advisory_live TO r; GRANT USAGE ON SEQUENCE fencelock_advisory_tokens TO r;\n"
    "  lock clients, lease mode:    GRANT SELECT, INSERT, UPDATE, DELETE ON fencelock_leases TO r; "
    "GRANT USAGE ON SEQUENCE fencelock_tokens TO r;\n"
    "  fenced writers:              GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric, "
    "text) TO r; (fencelock_fence(text, numeric) too for bare tokens; nothing on "
    "fencelock_fences)\n"
    "  note: in advisory mode any role that may CONNECT can take (or block) any advisory lock.\n";

}  // namespace

int migrate_command(const MigrateArgs& args) {
  Reporter reporter(args.json);
  BackendChoice backend = choose_backend(args.backend, args.json);
  auto ran = [&] {
    ConnectWarnings warnings(args.json);
    return migrate(backend.uri);
  }();
  if (!ran.ok()) {
    return reporter.fail(exit_code_for(ran.code()), std::string(code_name(ran.code())),
                         explain_connect_failure(ran.status(), backend));
  }
  if (args.json) {
    std::fputs((nlohmann::json{{"statements", *ran}}.dump() + "\n").c_str(), stdout);
  } else if (ran->empty()) {
    std::fputs("nothing to do: the schema is in place (or this backend needs none)\n", stdout);
  } else {
    for (const auto& statement : *ran)
      std::fputs(fmt::format("ran:\n{}\n", statement).c_str(), stdout);
  }
  if (!args.json &&
      (backend.uri.starts_with("postgres://") || backend.uri.starts_with("postgresql://"))) {
    std::fputs(kPostgresGrants, stdout);
  }
  return kExitOk;
}

}  // namespace fencelock::cli

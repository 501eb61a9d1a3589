#include "migrate_command.h"

#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "exit_codes.h"
#include "fencelock/migrate.h"
#include "reporter.h"

namespace fencelock::cli {

int migrate_command(const MigrateArgs& args) {
  Reporter reporter(args.json);
  BackendChoice backend = choose_backend(args.backend, args.json);
  auto ran = migrate(backend.uri);
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
  return kExitOk;
}

}  // namespace fencelock::cli

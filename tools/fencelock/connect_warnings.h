// Library warnings raised while a command connects (an accepted risk such as
// allow_stale_leader_revoke=true, an eviction policy that cannot be read, a redlock:// that
// tolerates no failure; and `list`'s count of held locks whose names are no lock keys) reach the
// operator on stderr: "fencelock: warning: MESSAGE", or with --json one object
// {"warning":"backend","message":MESSAGE}. Only while a ConnectWarnings lives (`run` and `elect`
// keep it through their acquisition: an instance that answered a round with an error, a
// fencing counter far ahead of its server's clock): later library messages (a lost lease, which
// every command reports itself) are not repeated.
//
// With -q/--quiet (set_quiet_accepted_risks), a warning about a risk the URI already accepted
// (the library ends it with "(accepted: OPTION=true)") is not shown: cron would mail it on every
// run.
//
// Thread-safety: one ConnectWarnings at a time per process (it installs the library's log sink);
// set_quiet_accepted_risks() before any.
#pragma once

#include <string_view>

#include "fencelock/client.h"

namespace fencelock::cli {

class ConnectWarnings {
 public:
  explicit ConnectWarnings(bool json);
  ~ConnectWarnings();
  ConnectWarnings(const ConnectWarnings&) = delete;
  ConnectWarnings& operator=(const ConnectWarnings&) = delete;
};

void set_quiet_accepted_risks(bool quiet);

// Client::connect(uri) with a ConnectWarnings around it.
Result<Client> connect_with_warnings(std::string_view uri, bool json);

}  // namespace fencelock::cli

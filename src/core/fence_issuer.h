// Fence issuers (Fencing::issuer, fencelock/types.h): the text that names which lock issued a
// token, and the one rule every fence applies to it. Pure functions, no I/O.
//
// An issuer is "<backend identity> <lock name>": the identity of the backend cluster whose
// counters issue the tokens (built by issuer_identity_of_uri() for redis://, redlock:// and
// memory://, by the backend itself for etcd and PostgreSQL, which ask their server), one space,
// then the name under which that cluster counts the lock's tokens. Both parts are escaped with
// escape_issuer_part(), so an issuer is printable ASCII and its first space separates the parts.
// docs/PROTOCOLS.md ("Fences") says what counts as the same issuer.
#pragma once

#include <string>
#include <string_view>

#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock::detail {

// Every byte outside '!'..'~', and '%', as %XX (upper-case hex): printable ASCII without spaces.
std::string escape_issuer_part(std::string_view part);

// identity + " " + escape_issuer_part(lock_name). `identity` is already escaped.
std::string make_issuer(std::string_view identity, std::string_view lock_name);

// The identity of a redis://, redlock:// or memory:// backend, from its URI (which
// Client::connect has accepted): no credentials, host names lower-cased, ports explicit, the
// Redlock instances sorted, the Redis database number (0 when absent):
//   redis://127.0.0.1:6379/0   redlock://a:7101,b:7102,c:7103/0   memory://tests?pid=42
// A memory:// table lives in one process: its identity names the process. Empty for a URI of
// another scheme (those backends name themselves).
std::string issuer_identity_of_uri(std::string_view uri);

// OK for a valid Fencing::issuer: empty (unnamed), or at most Fencing::kMaxIssuerBytes bytes of
// printable ASCII (' '..'~'). kInvalidArgument otherwise, naming `guard` ("RedisFence").
Status check_issuer(std::string_view issuer, std::string_view guard);

// The one rule of every fence, on a record (`recorded`: its highest token and issuer; no record
// at all is {0, ""}): a named record refuses another issuer and a bare token (kOtherLock); then
// a token below the highest is stale. A record written unnamed compares tokens only, and the
// first named token that passes names it (the caller writes `presented` as the new record).
enum class FenceVerdict { kAdmit, kStale, kOtherLock };
FenceVerdict judge_fencing(const Fencing& presented, const Fencing& recorded);

// An issuer as a message shows it: quoted, cut after 512 bytes ("..." then), or "no lock (a bare
// token)" for an empty one.
std::string shown_issuer(std::string_view issuer);

}  // namespace fencelock::detail

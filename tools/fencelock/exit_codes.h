// Exit codes of the fencelock CLI. docs/CLI.md lists them; keep the two in step.
//
// sysexits.h values where one fits, so that scripts can tell "retry later" (69, 75) from "fix the
// invocation" (64, 77). `fencelock run` otherwise returns its command's own exit code, so these
// codes can also come from the command; --json tells the two apart.
#pragma once

#include "fencelock/status.h"

namespace fencelock::cli {

inline constexpr int kExitOk = 0;
// EX_USAGE: bad option, duration, key or backend URI.
inline constexpr int kExitUsage = 64;
// EX_UNAVAILABLE: backend unreachable, no quorum, or a call timed out. Nothing is held.
inline constexpr int kExitUnavailable = 69;
// EX_SOFTWARE: internal error or unexpected server reply.
inline constexpr int kExitSoftware = 70;
// run: the lease was lost while the command ran (the command got SIGTERM).
inline constexpr int kExitLeaseLost = 73;
// EX_TEMPFAIL: the lock was held by another owner for the whole --wait.
inline constexpr int kExitNotAcquired = 75;
// EX_NOPERM: credentials rejected.
inline constexpr int kExitNoPermission = 77;
// run: the command exists but cannot be executed / was not found (shell conventions).
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;
// 128 + N: the command was killed by signal N, or fencelock was interrupted by it while waiting.
inline constexpr int kExitSignalBase = 128;
// torture and demo: a safety violation was found (torture: the checker; demo: a stale write
// admitted or a lost update).
inline constexpr int kExitViolation = 1;
// torture and demo: nothing refuted, but no verdict either (a fault that never took effect, a
// step that failed).
inline constexpr int kExitInconclusive = 2;

// The exit code for a failed library call (REQUIRES: code != kOk).
int exit_code_for(Code code);

}  // namespace fencelock::cli

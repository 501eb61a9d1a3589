#include "exit_codes.h"

namespace fencelock::cli {

int exit_code_for(Code code) {
  switch (code) {
    case Code::kOk:
      return kExitOk;
    case Code::kLocked:
    case Code::kFenced:  // a newer holder exists: like "held by another owner"
      return kExitNotAcquired;
    // A timed-out call left nothing held (the library released by owner id): like an unreachable
    // backend, the caller should retry later.
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
    case Code::kAborted:
      return kExitUnavailable;
    case Code::kInvalidArgument:
      return kExitUsage;
    case Code::kUnauthenticated:
    case Code::kPermissionDenied:
      return kExitNoPermission;
    case Code::kCancelled:
    case Code::kInternal:
      return kExitSoftware;
  }
  return kExitSoftware;
}

}  // namespace fencelock::cli

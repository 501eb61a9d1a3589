#include "fencelock/status.h"

namespace fencelock {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kLocked:
      return "locked";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kDeadlineExceeded:
      return "deadline exceeded";
    case Code::kCancelled:
      return "cancelled";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kUnauthenticated:
      return "unauthenticated";
    case Code::kPermissionDenied:
      return "permission denied";
    case Code::kInternal:
      return "internal";
    case Code::kFenced:
      return "fenced";
    case Code::kAborted:
      return "aborted";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(code_name(code_));
  if (!message_.empty()) out += ": " + message_;
  return out;
}

}  // namespace fencelock

// fencelock/status.h: the error model shared by every fencelock call.
//
// A Status is a small value: a Code and a one-line human message. Contention is a normal outcome
// (Code::kLocked), never an exception. Each code states what a caller should do next:
//
//   kOk                 success.
//   kLocked             someone else holds the lock (or held it for the whole wait). Retry later.
//   kUnavailable        no quorum / server unreachable. Nothing is held. Retry with backoff.
//   kDeadlineExceeded   a call timed out; its outcome on the server is unknown. fencelock already
//                       released by owner id whatever it may have taken. Retry is safe.
//   kCancelled          the caller's std::stop_token fired. Nothing is held.
//   kInvalidArgument    bad key, TTL, wait or URI. Do not retry: fix the input.
//   kUnauthenticated    wrong or missing credentials. Do not retry: fix the credentials.
//   kPermissionDenied   the credentials lack a needed right. Do not retry: grant it.
//   kInternal           a bug or an unexpected server reply. Report it.
//   kFenced             a fence refused a stale token: a newer holder exists. Stop. Or the
//                       token of another lock than the one that fences the resource (the
//                       message names both): stop; an administrator moves the resource.
//   kAborted            the caller's transaction lost a concurrency conflict. Roll back and
//                       retry the whole transaction.
//
// Messages never contain credentials or full owner ids.
//
// Thread-safety: Status and Result are plain values; distinct objects may be used concurrently.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fencelock {

enum class Code {
  kOk = 0,
  kLocked,
  kUnavailable,
  kDeadlineExceeded,
  kCancelled,
  kInvalidArgument,
  kUnauthenticated,
  kPermissionDenied,
  kInternal,
  // A fence refused a write: "rejected: stale token N < M", or a token of another lock
  // ("rejected: token N of lock 'P' cannot be compared with ...") (fence.h).
  kFenced,
  // The caller's transaction lost a concurrency conflict (PostgreSQL SQLSTATE 40001 serialization
  // failure, 40P01 deadlock): roll back and retry the whole transaction.
  kAborted,
};

// Stable lower-case name of a code, e.g. "locked", "unavailable".
std::string_view code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "locked: key 'jobs' is held by another owner" (or "ok").
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Either a T or a non-OK Status (absl::StatusOr in miniature).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  // An OK `status` holds no value: the Result becomes kInternal (as absl::StatusOr does), never
  // a Result that is neither a value nor an error.
  Result(Status status)  // NOLINT: implicit by design
      : state_(status.ok() ? Status(Code::kInternal,
                                    "a Result was built from an OK Status (a bug: return a value "
                                    "or an error)")
                           : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  // OK status when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }
  Code code() const { return ok() ? Code::kOk : std::get<Status>(state_).code(); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace fencelock

#include "fencelock/client.h"

#include <csignal>
#include <mutex>

#include <fmt/format.h>

#include "core/backend_registry.h"
#include "core/client_core.h"
#include "core/duration.h"
#include "core/fence_issuer.h"
#include "core/log_internal.h"
#include "core/saturate.h"
#include "core/uri.h"

namespace fencelock {

namespace {

Result<std::unique_ptr<detail::Backend>> make_backend(std::string_view uri,
                                                      const ClientOptions& options) {
  auto plugin = detail::backend_for_uri(uri);
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->connect(uri, options, /*check_only=*/false);
}

}  // namespace

namespace detail {

std::vector<HolderInfo> holders_of(std::vector<HolderRow> rows) {
  std::vector<HolderInfo> out;
  out.reserve(rows.size());
  std::size_t skipped = 0;
  std::size_t first_skipped_bytes = 0;
  for (HolderRow& row : rows) {
    auto key = LockKey::make(row.key);
    if (!key.ok()) {
      if (skipped++ == 0) first_skipped_bytes = row.key.size();
      continue;
    }
    out.push_back(HolderInfo{std::move(*key), std::move(row.owner_prefix), row.token,
                             row.ttl_remaining, std::move(row.metadata), row.session_bound});
  }
  if (skipped > 0) {
    log(LogLevel::kWarning,
        "list: left out {} held lock(s) whose name is not a lock key (empty, longer than {} bytes "
        "or with a NUL byte; the first is {} bytes long): written by another client",
        skipped, LockKey::kMaxBytes, first_skipped_bytes);
  }
  return out;
}

}  // namespace detail

namespace detail {

class ClientHandle {
 public:
  explicit ClientHandle(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}
  ~ClientHandle() {
    core_->cancel_pending();
    core_->wait_for_callbacks();
  }
  ClientHandle(const ClientHandle&) = delete;
  ClientHandle& operator=(const ClientHandle&) = delete;

 private:
  std::shared_ptr<ClientCore> core_;
};

}  // namespace detail

Client::Client(std::shared_ptr<detail::ClientCore> core)
    : core_(std::move(core)), handle_(std::make_shared<detail::ClientHandle>(core_)) {}

// hiredis writes to sockets without MSG_NOSIGNAL: a server that closes a connection would kill
// the process with SIGPIPE. Like gRPC, fencelock ignores SIGPIPE unless the program installed
// its own handler (documented in client.h).
static void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Durations enter deadlines: each must lie in [0, kMaxDuration] (fencelock/options.h).
static Status validate(const ClientOptions& options) {
  using std::chrono::milliseconds;
  const std::pair<const char*, milliseconds> durations[] = {
      {"connect_timeout", options.connect_timeout},
      {"io_timeout", options.io_timeout},
      {"release_timeout", options.release_timeout}};
  for (const auto& [name, value] : durations) {
    if (value < milliseconds(0) || value > kMaxDuration) {
      return Status(Code::kInvalidArgument,
                    fmt::format("ClientOptions::{} must lie in [0, {}], got {}ms", name,
                                detail::format_duration(kMaxDuration), value.count()));
    }
  }
  // One check for every backend: a negative factor would push valid_until() past the TTL, and
  // 0.5 or more would leave almost nothing of it (NaN fails both comparisons).
  if (!(options.drift_factor >= 0 && options.drift_factor < 0.5)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("ClientOptions::drift_factor must lie in [0, 0.5), got {}",
                              options.drift_factor));
  }
  return Status::Ok();
}

Result<Client> Client::connect(std::string_view uri, const ClientOptions& options) {
  ignore_sigpipe_once();
  if (auto valid = validate(options); !valid.ok()) return valid;
  auto backend = make_backend(uri, options);
  if (!backend.ok()) return backend.status();
  // redis://, redlock:// and memory:// are named by their URI; the others name themselves.
  return Client(std::make_shared<detail::ClientCore>(std::move(*backend), options,
                                                     detail::issuer_identity_of_uri(uri)));
}

Result<Lease> Client::acquire(const LockKey& key, const AcquireOptions& options) {
  auto state = core_->acquire(key, options);
  if (!state.ok()) return state.status();
  return Lease(std::move(*state));
}

void Client::acquire_async(const LockKey& key, const AcquireOptions& options,
                           std::function<void(Result<Lease>)> done) {
  core_->acquire_async(key, options,
                       [done = std::move(done)](Result<std::shared_ptr<detail::LeaseState>> state) {
                         if (!state.ok()) return done(state.status());
                         done(Lease(std::move(*state)));
                       });
}

std::future<Result<Lease>> Client::acquire_future(const LockKey& key,
                                                  const AcquireOptions& options) {
  auto promise = std::make_shared<std::promise<Result<Lease>>>();
  std::future<Result<Lease>> future = promise->get_future();
  acquire_async(key, options,
                [promise](Result<Lease> lease) { promise->set_value(std::move(lease)); });
  return future;
}

Result<std::optional<HolderInfo>> Client::inspect(const LockKey& key) {
  if (Status st = core_->backend().check_name(key.str()); !st.ok()) return st;
  auto row = core_->backend().inspect(key, detail::request_deadline(core_->options().io_timeout));
  if (!row.ok()) return row.status();
  if (!row->has_value()) return std::optional<HolderInfo>();
  detail::HolderRow& found = **row;
  return std::optional<HolderInfo>(HolderInfo{key, std::move(found.owner_prefix), found.token,
                                              found.ttl_remaining, std::move(found.metadata),
                                              found.session_bound});
}

Result<std::vector<HolderInfo>> Client::list(std::string_view prefix, const ListOptions& options) {
  if (options.timeout <= std::chrono::milliseconds(0) || options.timeout > kMaxDuration) {
    return Status(Code::kInvalidArgument,
                  "ListOptions::timeout must be greater than 0 and at most kMaxDuration");
  }
  if (options.max_locks == 0) {
    return Status(Code::kInvalidArgument, "ListOptions::max_locks must be greater than 0");
  }
  // A lock key never holds a NUL (LockKey), and a backend that cuts a string at one (libpq's
  // text parameters) would list every lock that starts with the part before it.
  if (prefix.find('\0') != std::string_view::npos) {
    return Status(Code::kInvalidArgument, "a list prefix must not contain a NUL byte");
  }
  if (Status st = core_->backend().check_name(prefix); !st.ok()) return st;
  const detail::ListBounds bounds{detail::deadline_after(detail::Clock::now(), options.timeout),
                                  options.max_locks};
  auto rows = core_->backend().list(prefix, bounds);
  if (!rows.ok()) return rows.status();
  return detail::holders_of(std::move(*rows));
}

std::string Client::describe() const { return core_->backend().describe(); }

MetricsSnapshot Client::metrics() const { return core_->metrics_snapshot(); }

}  // namespace fencelock

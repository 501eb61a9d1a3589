// make_etcd_backend: the URI read (etcd/etcd_options.h), the certificate files, the connection,
// the server version check and the fence issuer's identity, then the backend
// (etcd/etcd_backend.cpp) on that connection.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/fence_issuer.h"
#include "core/log_internal.h"
#include "etcd/etcd_backend.h"
#include "etcd/etcd_connection.h"
#include "etcd/etcd_options.h"
#include "etcd/etcd_version.h"

namespace fencelock::detail {
namespace etcd {
namespace {

// A certificate or key file: a regular file of at most kMaxPemBytes. Opened without blocking
// and checked on the open descriptor, so that a FIFO cannot hang connect() and /dev/zero cannot
// fill memory.
constexpr off_t kMaxPemBytes = 1 << 20;

Result<std::string> read_pem(const std::string& option, const std::string& path) {
  const auto fail = [&](std::string_view why) {
    return Status(Code::kInvalidArgument, fmt::format("etcds:// {}={}: {}", option, path, why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return fail(fmt::format("cannot read the file: {}", std::generic_category().message(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file (a PEM file is expected)");
  }
  if (st.st_size > kMaxPemBytes) {
    ::close(fd);
    return fail(
        fmt::format("{} bytes, more than a PEM file holds (at most {})", st.st_size, kMaxPemBytes));
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

// Refuses (kInvalidArgument, as an evicting Redis is) a member whose version revokes live leases
// after a leader stall (etcd/etcd_version.h), unless `allow`, which logs a warning instead. A
// version that cannot be read (a proxy without Maintenance, a permission error) is a warning, not a
// refusal. `cluster_id`: the cluster id of the answer's header (left alone without an answer).
Status check_server_version(EtcdConnection& conn, bool allow, std::uint64_t* cluster_id) {
  pb::StatusRequest request;
  pb::StatusResponse response;
  const auto deadline = Clock::now() + conn.options().io_timeout;
  grpc::Status status = conn.call(deadline, [&](Stubs& s, grpc::ClientContext& c) {
    return s.maintenance->Status(&c, request, &response);
  });
  if (!status.ok()) {
    detail::log(LogLevel::kWarning,
                "could not read the etcd server version ({}): etcd before 3.4.31 and 3.5.13 can "
                "revoke live leases after a leader stall (etcd-io/etcd#15247)",
                to_status(status, "status").message());
    return Status::Ok();
  }
  *cluster_id = response.header().cluster_id();
  auto version = parse_server_version(response.version());
  if (!version || !revokes_live_leases_after_a_leader_stall(*version)) return Status::Ok();
  const std::string risk = fmt::format(
      "etcd {} can revoke live leases after a leader stall (a former leader that resumes revokes "
      "leases it believes expired: etcd-io/etcd#15247, fixed in 3.4.31 and 3.5.13), so that a "
      "waiter is granted while the holder still holds; fencing tokens still order writes",
      response.version());
  if (!allow) {
    return Status(Code::kInvalidArgument,
                  risk +
                      "; upgrade etcd, or accept the risk with the URI option "
                      "allow_stale_leader_revoke=true");
  }
  detail::log(LogLevel::kWarning, "{} (accepted: allow_stale_leader_revoke=true)", risk);
  return Status::Ok();
}

// etcds://: the CA bundle (default: the system roots) and the client certificate of `options`,
// read now; etcd:// has none.
Result<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const ParsedUri& uri,
                                                                      const EtcdOptions& options) {
  if (uri.scheme == "etcd") return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  for (auto [name, path, pem] : {std::tuple{"cacert", &options.cacert, &ssl.pem_root_certs},
                                 std::tuple{"cert", &options.cert, &ssl.pem_cert_chain},
                                 std::tuple{"key", &options.key, &ssl.pem_private_key}}) {
    if (path->empty()) continue;
    auto text = read_pem(name, *path);
    if (!text.ok()) return text.status();
    *pem = std::move(*text);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace
}  // namespace etcd

Result<std::unique_ptr<Backend>> make_etcd_backend(std::string_view text,
                                                   const ClientOptions& options, bool check_only) {
  auto parsed = parse_uri(text, 2379);
  if (!parsed.ok()) return parsed.status();
  ParsedUri& uri = *parsed;
  if (uri.endpoints.empty())
    return Status(Code::kInvalidArgument, uri.scheme + ":// needs at least one host");
  if (!uri.path.empty()) {
    return Status(Code::kInvalidArgument, uri.scheme + ":// takes no path (no /... after hosts)");
  }
  auto etcd_options = etcd::parse_etcd_options(uri);
  if (!etcd_options.ok()) return etcd_options.status();
  auto credentials = etcd::channel_credentials(uri, *etcd_options);
  if (!credentials.ok()) return credentials.status();
  if (uri.user.empty()) {
    if (const char* env = std::getenv("FENCELOCK_ETCD_USER"); env != nullptr) uri.user = env;
  }
  if (!uri.has_password && !uri.user.empty()) {
    if (const char* env = std::getenv("FENCELOCK_ETCD_PASSWORD"); env != nullptr) {
      uri.password = env;
      uri.has_password = true;
    }
  }
  if (!uri.user.empty() && !uri.has_password) {
    return Status(Code::kInvalidArgument, uri.scheme +
                                              ":// with a user needs a password (user:password@ or "
                                              "FENCELOCK_ETCD_PASSWORD)");
  }
  if (check_only) return std::unique_ptr<Backend>();
  std::vector<std::string> endpoints;
  for (const auto& endpoint : uri.endpoints) endpoints.push_back(endpoint_text(endpoint));
  auto connection = std::make_unique<etcd::EtcdConnection>(endpoints, uri.user, uri.password,
                                                           *credentials, options);
  if (Status st = connection->connect(); !st.ok()) {
    if (st.code() != Code::kUnavailable) return st;
    return Status(Code::kUnavailable,
                  st.message() + (uri.scheme == "etcds"
                                      ? "; check that the members serve TLS, that cacert signed "
                                        "their certificates (which must name the host dialled) "
                                        "and that they accept cert/key"
                                      : "; is etcd running there? (a TLS cluster needs etcds://)"));
  }
  std::uint64_t cluster_id = 0;
  if (Status st = etcd::check_server_version(*connection, etcd_options->allow_stale_leader_revoke,
                                             &cluster_id);
      !st.ok())
    return st;
  // Fence issuers name the cluster by the id in every etcd answer (the same through any member,
  // any endpoint spelling, any process); a member that did not answer Status leaves the sorted
  // endpoint list instead.
  std::string issuer_identity;
  if (cluster_id != 0) {
    issuer_identity = fmt::format("etcd:cluster={:x}", cluster_id);
  } else {
    std::sort(endpoints.begin(), endpoints.end());
    issuer_identity = "etcd://" + escape_issuer_part(fmt::format("{}", fmt::join(endpoints, ",")));
  }
  std::string description = redact(uri);
  const std::string options_shown = etcd::describe_etcd_options(*etcd_options);
  if (!options_shown.empty()) description += "?" + options_shown;
  return etcd::make_backend_on(std::move(connection), std::move(description), uri.endpoints.size(),
                               etcd_options->key_namespace, std::move(issuer_identity));
}

}  // namespace fencelock::detail

#include "support/etcd_cluster.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHealthyTimeout = std::chrono::seconds(30);
constexpr auto kLeaderTimeout = std::chrono::seconds(10);
constexpr auto kEtcdctlTimeout = std::chrono::seconds(30);
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr int kStartAttempts = 3;  // fresh ports tried when another process grabbed one of ours

// etcdctl reads these as defaults for its flags; a developer's settings must not leak in.
const std::vector<std::string> kEtcdctlEnvironment = {"ETCDCTL_API=3",
                                                      "ETCDCTL_ENDPOINTS",
                                                      "ETCDCTL_USER",
                                                      "ETCDCTL_PASSWORD",
                                                      "ETCDCTL_DIAL_TIMEOUT",
                                                      "ETCDCTL_COMMAND_TIMEOUT",
                                                      "ETCDCTL_WRITE_OUT",
                                                      "ETCDCTL_CACERT",
                                                      "ETCDCTL_CERT",
                                                      "ETCDCTL_KEY",
                                                      "ETCDCTL_INSECURE_TRANSPORT"};

std::string find_program(const std::string& name, const std::string& package) {
  if (auto path = find_executable(name)) return *path;
  if (auto path = find_executable("/usr/bin/" + name)) return *path;
  throw std::runtime_error(fmt::format(
      "{} not found in PATH or /usr/bin: install it (scripts/deps.sh installs the Debian package "
      "{})",
      name, package));
}

// Unique per cluster: a restarted test binary must never join members of an earlier run.
std::string unique_token() {
  static std::atomic<int> counter{0};
  return fmt::format("fencelock-{}-{}-{}", ::getpid(), counter.fetch_add(1),
                     Clock::now().time_since_epoch().count());
}

std::string http_url(std::uint16_t port) { return fmt::format("http://127.0.0.1:{}", port); }

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

EtcdTls make_test_certificates(const std::string& dir) {
  const std::string openssl = find_program("openssl", "openssl");
  EtcdTls tls{dir + "/ca.crt", dir + "/server.crt", dir + "/server.key", dir + "/client.crt",
              dir + "/client.key"};
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {openssl};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult result = run_command(argv, {}, "", std::chrono::seconds(30));
    if (result.exit_code != 0) {
      throw std::runtime_error(fmt::format("openssl {} failed ({}): {}", args.front(),
                                           result.exit_code, result.stderr_text));
    }
  };
  const std::vector<std::string> new_key = {"-newkey", "ec", "-pkeyopt",
                                            "ec_paramgen_curve:prime256v1", "-nodes"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  run(with({"req", "-x509", "-days", "2", "-subj", "/CN=fencelock-test-ca", "-keyout",
            dir + "/ca.key", "-out", tls.ca},
           new_key));
  auto issue = [&](const std::string& name, const std::string& subject,
                   const std::string& extensions, const std::string& cert, const std::string& key) {
    const std::string csr = dir + "/" + name + ".csr", ext = dir + "/" + name + ".ext";
    std::ofstream(ext) << extensions;
    run(with({"req", "-subj", subject, "-keyout", key, "-out", csr}, new_key));
    run({"x509", "-req", "-days", "2", "-in", csr, "-CA", tls.ca, "-CAkey", dir + "/ca.key",
         "-CAcreateserial", "-extfile", ext, "-out", cert});
  };
  issue("server", "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n", tls.server_cert,
        tls.server_key);
  issue("client", "/CN=fencelock-test-client", "extendedKeyUsage=clientAuth\n", tls.client_cert,
        tls.client_key);
  return tls;
}

std::unique_ptr<EtcdCluster> EtcdCluster::start_tls(int members, EtcdTls tls) {
  return start_cluster(members, std::move(tls));
}

std::unique_ptr<EtcdCluster> EtcdCluster::start(int members) {
  return start_cluster(members, std::nullopt);
}

std::unique_ptr<EtcdCluster> EtcdCluster::start_cluster(int members, std::optional<EtcdTls> tls) {
  if (members < 1) throw std::invalid_argument("EtcdCluster::start: members must be at least 1");
  std::string etcd = find_program("etcd", "etcd-server");
  std::string etcdctl = find_program("etcdctl", "etcd-client");
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(
      make_temp_dir("fencelock-etcd-"), std::move(etcd), std::move(etcdctl), members));
  cluster->tls_ = std::move(tls);
  std::vector<int> all;
  all.reserve(static_cast<std::size_t>(members));
  for (int i = 0; i < members; ++i) all.push_back(i);
  for (int attempt = 1;; ++attempt) {
    cluster->assign_ports_and_token();
    for (int i : all) cluster->launch(i, /*existing=*/false);
    try {
      cluster->wait_until_healthy(all);
      return cluster;
    } catch (const std::runtime_error&) {
      if (!cluster->port_taken() || attempt == kStartAttempts) throw;
    }
    cluster->kill_all();
    for (int i : all) {
      remove_tree(cluster->data_dir(i));
      std::error_code ignored;
      std::filesystem::remove(cluster->log_path(i), ignored);
    }
  }
}

EtcdCluster::EtcdCluster(std::string dir, std::string etcd, std::string etcdctl, int members)
    : dir_(std::move(dir)),
      etcd_(std::move(etcd)),
      etcdctl_(std::move(etcdctl)),
      members_(static_cast<std::size_t>(members)) {}

EtcdCluster::~EtcdCluster() {
  kill_all();
  remove_tree(dir_);
}

void EtcdCluster::kill_all() noexcept {
  for (auto& m : members_) {
    m.process.reset();  // ~ChildProcess: SIGKILL to the process group + reap
    m.paused = false;
  }
}

int EtcdCluster::size() const { return static_cast<int>(members_.size()); }

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (i == 0 ? "" : ",") + client_endpoint(i);
  return out;
}

std::string EtcdCluster::uri() const {
  if (!tls_) return "etcd://" + endpoints() + "?" + kAcceptDebianEtcd;
  return fmt::format("etcds://{}?cacert={}&cert={}&key={}&{}", endpoints(),
                     percent_encode(tls_->ca), percent_encode(tls_->client_cert),
                     percent_encode(tls_->client_key), kAcceptDebianEtcd);
}

std::string EtcdCluster::client_endpoint(int i) const {
  return fmt::format("127.0.0.1:{}", member(i).client_port);
}

std::string EtcdCluster::log_path(int i) const { return fmt::format("{}/m{}.log", dir_, i); }

pid_t EtcdCluster::pid(int i) const {
  const auto& process = member(i).process;
  return process ? process->pid() : -1;
}

std::string EtcdCluster::data_dir(int i) const { return fmt::format("{}/m{}", dir_, i); }

EtcdCluster::Member& EtcdCluster::member(int i) { return members_.at(static_cast<std::size_t>(i)); }

const EtcdCluster::Member& EtcdCluster::member(int i) const {
  return members_.at(static_cast<std::size_t>(i));
}

void EtcdCluster::assign_ports_and_token() {
  std::set<std::uint16_t> used;
  auto fresh_port = [&used] {
    std::uint16_t port;
    do {
      port = free_loopback_port();
    } while (!used.insert(port).second);
    return port;
  };
  for (auto& m : members_) {
    m.client_port = fresh_port();
    m.peer_port = fresh_port();
  }
  token_ = unique_token();
}

std::vector<std::string> EtcdCluster::member_args(int i, bool existing) const {
  std::string initial_cluster;
  for (int j = 0; j < size(); ++j) {
    initial_cluster += fmt::format("{}m{}={}", j == 0 ? "" : ",", j, http_url(member(j).peer_port));
  }
  const std::string client_url = tls_ ? fmt::format("https://127.0.0.1:{}", member(i).client_port)
                                      : http_url(member(i).client_port);
  const std::string peer_url = http_url(member(i).peer_port);
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"--name", fmt::format("m{}", i)},
      {"--data-dir", data_dir(i)},
      {"--listen-client-urls", client_url},
      {"--advertise-client-urls", client_url},
      {"--listen-peer-urls", peer_url},
      {"--initial-advertise-peer-urls", peer_url},
      {"--initial-cluster", initial_cluster},
      {"--initial-cluster-token", token_},
      {"--initial-cluster-state", existing ? "existing" : "new"},
      {"--heartbeat-interval", "50"},
      {"--election-timeout", "500"},
      {"--bcrypt-cost", "4"},  // the minimum: user logins in auth tests stay fast
      {"--logger", "zap"},
      {"--log-outputs", "stderr"},
  };
  std::vector<std::string> argv = {etcd_};
  for (const auto& [name, value] : flags) argv.insert(argv.end(), {name, value});
  if (tls_) {
    argv.insert(argv.end(), {"--cert-file", tls_->server_cert, "--key-file", tls_->server_key,
                             "--trusted-ca-file", tls_->ca, "--client-cert-auth"});
  }
  return argv;
}

void EtcdCluster::launch(int i, bool existing) {
  // One descriptor for stdout and stderr, appending: a restarted member's log follows the last.
  int log_fd = ::open(log_path(i).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    throw std::runtime_error(
        fmt::format("cannot open '{}': {}", log_path(i), std::generic_category().message(errno)));
  }
  SpawnOptions spawn;
  spawn.stdout_fd = log_fd;
  spawn.stderr_fd = log_fd;
  spawn.die_with_parent = true;
  try {
    member(i).process.emplace(ChildProcess::spawn_with(member_args(i, existing), spawn));
  } catch (...) {
    ::close(log_fd);
    throw;
  }
  ::close(log_fd);
  member(i).paused = false;
}

std::vector<std::string> EtcdCluster::etcdctl_argv(const std::string& endpoints,
                                                   const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {etcdctl_};
  if (tls_) {
    std::string urls;
    for (std::size_t at = 0; at <= endpoints.size();) {
      std::size_t comma = std::min(endpoints.find(',', at), endpoints.size());
      urls += (urls.empty() ? "https://" : ",https://") + endpoints.substr(at, comma - at);
      at = comma + 1;
    }
    argv.insert(argv.end(), {"--endpoints=" + urls, "--cacert=" + tls_->ca,
                             "--cert=" + tls_->client_cert, "--key=" + tls_->client_key});
  } else {
    argv.push_back("--endpoints=" + endpoints);
  }
  if (!root_password_.empty()) argv.push_back("--user=root:" + root_password_);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void EtcdCluster::wait_until_healthy(const std::vector<int>& indexes) {
  std::string endpoint_list;
  for (int i : indexes) endpoint_list += (endpoint_list.empty() ? "" : ",") + client_endpoint(i);
  const auto argv = etcdctl_argv(
      endpoint_list, {"--dial-timeout=1s", "--command-timeout=2s", "endpoint", "health"});
  const auto deadline = Clock::now() + kHealthyTimeout;
  std::string last = "no answer yet";
  while (Clock::now() < deadline) {
    for (int i : indexes) {
      auto& process = member(i).process;
      if (!process->running()) {
        throw std::runtime_error(fmt::format(
            "etcd member m{} (client {}) exited with code {} while starting; log {}:\n{}", i,
            client_endpoint(i), process->wait(), log_path(i), log_tail(i)));
      }
    }
    RunResult health = run_command(argv, kEtcdctlEnvironment, "", std::chrono::seconds(10));
    if (health.exit_code == 0) return;
    last = health.stderr_text.empty() ? health.stdout_text : health.stderr_text;
    std::this_thread::sleep_for(kPollInterval);  // fine in this test helper
  }
  throw std::runtime_error(fmt::format(
      "etcd members {} did not become healthy within 30 s (last etcdctl output: {});\n{}",
      endpoint_list, last, members_log_tails()));
}

bool EtcdCluster::port_taken() const {
  for (int i = 0; i < size(); ++i) {
    std::ifstream in(log_path(i));
    for (std::string line; std::getline(in, line);) {
      if (line.find("address already in use") != std::string::npos) return true;
    }
  }
  return false;
}

std::string EtcdCluster::log_tail(int i, int lines) const { return file_tail(log_path(i), lines); }

std::string EtcdCluster::members_log_tails() const {
  std::string out;
  for (int i = 0; i < size(); ++i) {
    out += fmt::format("--- m{} ({}), log {}:\n{}", i, client_endpoint(i), log_path(i),
                       log_tail(i, 8));
  }
  return out;
}

void EtcdCluster::kill(int i) {
  auto& m = member(i);
  if (m.process && m.process->running()) {
    m.process->signal_group(SIGKILL);
    m.process->wait();
  }
  m.paused = false;
}

void EtcdCluster::restart(int i) {
  kill(i);
  launch(i, /*existing=*/true);
  int running = 0;
  for (auto& m : members_) running += m.process && m.process->running() && !m.paused ? 1 : 0;
  if (2 * running > size()) wait_until_healthy({i});
}

void EtcdCluster::pause(int i) {
  auto& m = member(i);
  if (m.process && m.process->running()) {
    m.process->signal(SIGSTOP);
    m.paused = true;
  }
}

void EtcdCluster::resume(int i) {
  auto& m = member(i);
  if (m.process) m.process->signal(SIGCONT);
  m.paused = false;
}

int EtcdCluster::leader() {
  // Each member reports its own id and the leader's; ids are learned afresh in each round.
  std::vector<std::uint64_t> ids(members_.size(), 0);
  const auto deadline = Clock::now() + kLeaderTimeout;
  std::string last = "no member answered";
  while (Clock::now() < deadline) {
    std::uint64_t leader_id = 0;
    for (int i = 0; i < size(); ++i) {
      auto& m = member(i);
      if (!m.process || m.paused || !m.process->running()) continue;
      RunResult status =
          run_command(etcdctl_argv(client_endpoint(i), {"--dial-timeout=1s", "--command-timeout=1s",
                                                        "endpoint", "status", "--write-out=json"}),
                      kEtcdctlEnvironment, "", std::chrono::seconds(5));
      if (status.exit_code != 0) {
        last = first_line(status.stderr_text);
        continue;
      }
      try {
        const auto reply = nlohmann::json::parse(status.stdout_text).at(0).at("Status");
        ids[static_cast<std::size_t>(i)] = reply.at("header").at("member_id").get<std::uint64_t>();
        if (auto id = reply.at("leader").get<std::uint64_t>(); id != 0) leader_id = id;
      } catch (const nlohmann::json::exception& e) {
        last = fmt::format("unexpected status output '{}': {}", status.stdout_text, e.what());
      }
    }
    // A paused or dead leader's id was not learned above: wait until the others replace it.
    for (int i = 0; i < size(); ++i) {
      if (leader_id != 0 && ids[static_cast<std::size_t>(i)] == leader_id) return i;
    }
    std::this_thread::sleep_for(kPollInterval);  // an election is under way
  }
  throw std::runtime_error(
      fmt::format("no etcd member reported a reachable leader within 10 s (last: {});\n{}", last,
                  members_log_tails()));
}

std::string EtcdCluster::etcdctl(const std::vector<std::string>& args, std::string_view input) {
  RunResult result =
      run_command(etcdctl_argv(endpoints(), args), kEtcdctlEnvironment, input, kEtcdctlTimeout);
  if (result.exit_code != 0) {
    std::string joined;
    for (const auto& arg : args) joined += " " + arg;
    throw std::runtime_error(
        fmt::format("etcdctl{} failed with exit code {}{}: {}", joined, result.exit_code,
                    result.timed_out ? " (timed out after 30 s)" : "", result.stderr_text));
  }
  return result.stdout_text;
}

void EtcdCluster::enable_auth(const std::string& user, const std::string& password) {
  if (user == "root")
    throw std::invalid_argument("EtcdCluster::enable_auth: user must not be root");
  const std::string root_password = "root-" + token_;
  etcdctl({"user", "add", "root", "--interactive=false", "--new-user-password=" + root_password});
  etcdctl({"user", "grant-role", "root", "root"});
  etcdctl({"user", "add", user, "--interactive=false", "--new-user-password=" + password});
  etcdctl({"role", "add", user});
  // --from-key with the empty key: every key.
  etcdctl({"role", "grant-permission", user, "--from-key", "readwrite", ""});
  etcdctl({"user", "grant-role", user, user});
  etcdctl({"auth", "enable"});
  root_password_ = root_password;
}

}  // namespace fencelock::testing

// Real etcd clusters for integration tests.
//
// An EtcdCluster is `members` etcd 3.4 processes (the Debian package etcd-server) on 127.0.0.1,
// each with a free client port and a free peer port, its own data directory under one temporary
// directory, and a cluster token unique to the cluster. Member i is started with
//   --name mI --data-dir TMP/mI --listen-client-urls http://127.0.0.1:C --advertise-client-urls
//   (same) --listen-peer-urls http://127.0.0.1:P --initial-advertise-peer-urls (same)
//   --initial-cluster m0=...,m1=...,... --initial-cluster-token T --initial-cluster-state new
//   --heartbeat-interval 50 --election-timeout 500 --bcrypt-cost 4
// and logs to TMP/mI.log. The short timeouts make leader elections take well under a second;
// the minimum lease TTL stays ceil(1.5 x 500 ms) = 1 s, below any TTL a test uses. etcd still
// fsyncs its WAL (3.4 has no switch to turn that off), so puts cost a disk flush.
//
// Members are started with PR_SET_PDEATHSIG, so they die with the thread that started them:
// create clusters on the test's main thread (SetUp, SetUpTestSuite, a fixture), not on a worker
// thread that exits before the test ends. restart() starts a process too; the same rule applies.
//
// Failures throw std::runtime_error with a message that says what to do (e.g. install
// etcd-server) and includes the tail of the member's log.
//
// Thread-safety: etcdctl(), endpoints(), uri() and client_endpoint() may be called from several
// threads at once; kill(), restart(), pause(), resume(), leader() and enable_auth() must not race
// with each other or with destruction.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/process.h"

namespace fencelock::testing {

// PEM files for a TLS test cluster, made by make_test_certificates().
struct EtcdTls {
  std::string ca;           // CA certificate (trusted by servers and clients)
  std::string server_cert;  // for 127.0.0.1 (IP SAN), signed by the CA
  std::string server_key;
  std::string client_cert;  // CN fencelock-test-client, signed by the CA
  std::string client_key;
};

// Makes a throwaway CA and a server and client certificate under `dir` with the openssl tool
// (Debian package openssl). P-256 keys, valid 2 days. Throws std::runtime_error if openssl fails.
EtcdTls make_test_certificates(const std::string& dir);

// Debian 12's etcd (3.4.23) has the stale-leader lease revocation defect that fencelock refuses
// by default (src/etcd/etcd_version.h): every test URI accepts it with this query option.
inline constexpr const char* kAcceptDebianEtcd = "allow_stale_leader_revoke=true";

class EtcdCluster {
 public:
  // Starts `members` etcd processes and waits (at most 30 s) until every member reports healthy
  // to `etcdctl endpoint health`, which needs an elected leader. Retries with fresh ports when
  // another process took one in between. Throws std::invalid_argument if members < 1, and
  // std::runtime_error if etcd or etcdctl is missing, a member exits, or the cluster does not
  // become healthy in time.
  static std::unique_ptr<EtcdCluster> start(int members = 3);
  // The same with TLS on the client URLs (https://), requiring client certificates signed by
  // tls.ca (--client-cert-auth). etcdctl() then presents the client certificate.
  static std::unique_ptr<EtcdCluster> start_tls(int members, EtcdTls tls);

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;
  // SIGKILL every member (resuming none: SIGKILL reaches stopped processes), reap, remove the
  // temporary directory. Never throws.
  ~EtcdCluster();

  int size() const;
  std::string endpoints() const;  // "127.0.0.1:C0,127.0.0.1:C1,..." (client ports)
  // "etcd://" + endpoints() + "?" + kAcceptDebianEtcd; with TLS "etcds://" + endpoints() +
  // "?cacert=..&cert=..&key=..&" + kAcceptDebianEtcd.
  std::string uri() const;
  std::string client_endpoint(int i) const;  // "127.0.0.1:Ci"
  std::string log_path(int i) const;         // TMP/mI.log
  pid_t pid(int i) const;                    // of member i's current (or last) process

  // SIGKILL member i and reap it. No-op if it is not running. REQUIRES: 0 <= i < size().
  void kill(int i);
  // Starts member i again with its ports and data directory (--initial-cluster-state existing),
  // killing the running process first. Waits (at most 30 s) until the member reports healthy if
  // a majority of members is then running; otherwise returns once it is launched, since a member
  // without a quorum does not serve clients. Throws std::runtime_error like start().
  void restart(int i);
  // SIGSTOP / SIGCONT member i: a paused member keeps its sockets open but answers nothing, and
  // its peers elect a new leader if it led.
  void pause(int i);
  void resume(int i);

  // Index of the member that is the Raft leader, asking the running, unpaused members with
  // `etcdctl endpoint status --write-out=json`; never a paused or killed member. Waits (at most
  // 10 s) while an election is under way or the members still follow a paused leader. Throws
  // std::runtime_error if no reachable leader is known in time.
  int leader();

  // Runs `etcdctl --endpoints=<endpoints()> ARGS...` with ETCDCTL_API=3 (and --user root:... once
  // enable_auth() ran), at most 30 s. Returns its stdout; throws std::runtime_error with the exit
  // code and stderr if it fails. `input` goes to its stdin (`etcdctl txn` reads its Txn there).
  std::string etcdctl(const std::vector<std::string>& args, std::string_view input = "");

  // Turns on authentication: creates user `root` (with role root and a password only this object
  // knows) and user `user` with `password` and a role `user` granting readwrite on every key, then
  // runs `etcdctl auth enable`. Afterwards etcdctl() authenticates as root.
  // REQUIRES: user != "root"; called at most once.
  void enable_auth(const std::string& user, const std::string& password);

 private:
  struct Member {
    std::uint16_t client_port = 0;
    std::uint16_t peer_port = 0;
    std::optional<ChildProcess> process;
    bool paused = false;
  };

  static std::unique_ptr<EtcdCluster> start_cluster(int members, std::optional<EtcdTls> tls);
  EtcdCluster(std::string dir, std::string etcd, std::string etcdctl, int members);
  void assign_ports_and_token();
  std::vector<std::string> member_args(int i, bool existing) const;
  void launch(int i, bool existing);
  void wait_until_healthy(const std::vector<int>& indexes);
  std::string data_dir(int i) const;
  std::string log_tail(int i, int lines = 20) const;
  std::string members_log_tails() const;
  bool port_taken() const;
  void kill_all() noexcept;
  std::vector<std::string> etcdctl_argv(const std::string& endpoints,
                                        const std::vector<std::string>& args) const;
  Member& member(int i);
  const Member& member(int i) const;

  std::string dir_;
  std::string etcd_;
  std::string etcdctl_;
  std::string token_;
  std::string root_password_;  // "" until enable_auth()
  std::optional<EtcdTls> tls_;
  std::vector<Member> members_;
};

}  // namespace fencelock::testing

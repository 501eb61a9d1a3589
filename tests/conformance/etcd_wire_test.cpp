// The project's etcd .proto (src/etcd/*.proto) against real etcd 3.4 members: each service and
// stream fencelock's etcd backend uses, called through the generated stubs, answers with the
// fields the proto says. Also pins the layout of `etcdctl lock` that the fencelock mutex must
// share (docs/PROTOCOLS.md, "etcd"): key NAME/<lease id in lowercase hex>, holder = lowest create
// revision under NAME/, the key removed when etcdctl's session ends.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "etcd/fencelock_election.grpc.pb.h"
#include "etcd/fencelock_etcd.grpc.pb.h"
#include "support/etcd_cluster.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace pb = fencelock::etcdserverpb;
namespace electionpb = fencelock::v3electionpb;

constexpr auto kCallTimeout = 10s;

void set_deadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
}

// Plain-text gRPC to one member. An http_proxy in the environment must not capture loopback.
std::shared_ptr<grpc::Channel> insecure_channel(const std::string& endpoint) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), arguments);
}

std::string describe(const grpc::Status& status) {
  return fmt::format("gRPC code {}: {}", static_cast<int>(status.error_code()),
                     status.error_message());
}

// The range_end that makes a Range cover every key starting with `prefix` (etcd's
// GetPrefixRangeEnd).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

std::string lease_hex(std::int64_t lease) {
  return fmt::format("{:x}", static_cast<std::uint64_t>(lease));
}

class EtcdWire : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = EtcdCluster::start(3).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    channel_ = insecure_channel(cluster_->client_endpoint(0));
    kv_ = pb::KV::NewStub(channel_);
    watch_ = pb::Watch::NewStub(channel_);
    lease_ = pb::Lease::NewStub(channel_);
    election_ = electionpb::Election::NewStub(channel_);
  }

  pb::PutResponse put(const std::string& key, const std::string& value, std::int64_t lease = 0) {
    pb::PutRequest request;
    request.set_key(key);
    request.set_value(value);
    request.set_lease(lease);
    pb::PutResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv_->Put(&context, request, &response);
    EXPECT_TRUE(status.ok()) << "Put " << key << ": " << describe(status);
    return response;
  }

  // The keys starting with `prefix` (or exactly `key` when prefix is false), oldest first.
  pb::RangeResponse range(const std::string& key, bool prefix = false) {
    pb::RangeRequest request;
    request.set_key(key);
    if (prefix) request.set_range_end(prefix_end(key));
    request.set_sort_target(pb::RangeRequest::CREATE);
    request.set_sort_order(pb::RangeRequest::ASCEND);
    pb::RangeResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv_->Range(&context, request, &response);
    EXPECT_TRUE(status.ok()) << "Range " << key << ": " << describe(status);
    return response;
  }

  std::int64_t grant_lease(std::int64_t ttl_seconds) {
    pb::LeaseGrantRequest request;
    request.set_ttl(ttl_seconds);
    pb::LeaseGrantResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = lease_->LeaseGrant(&context, request, &response);
    EXPECT_TRUE(status.ok()) << "LeaseGrant: " << describe(status);
    EXPECT_TRUE(response.error().empty()) << response.error();
    return response.id();
  }

  grpc::Status revoke_lease(std::int64_t id) {
    pb::LeaseRevokeRequest request;
    request.set_id(id);
    pb::LeaseRevokeResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    return lease_->LeaseRevoke(&context, request, &response);
  }

  pb::LeaseTimeToLiveResponse time_to_live(std::int64_t id) {
    pb::LeaseTimeToLiveRequest request;
    request.set_id(id);
    request.set_keys(true);
    pb::LeaseTimeToLiveResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = lease_->LeaseTimeToLive(&context, request, &response);
    EXPECT_TRUE(status.ok()) << "LeaseTimeToLive: " << describe(status);
    return response;
  }

  // One LeaseKeepAlive round on a fresh stream.
  pb::LeaseKeepAliveResponse keep_alive_once(std::int64_t id) {
    grpc::ClientContext context;
    set_deadline(context);
    auto stream = lease_->LeaseKeepAlive(&context);
    pb::LeaseKeepAliveRequest request;
    request.set_id(id);
    pb::LeaseKeepAliveResponse response;
    EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->Read(&response));
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << "LeaseKeepAlive: " << describe(status);
    return response;
  }

  // The fencelock mutex's acquire step: create NAME/<lease hex> unless it exists, and read the
  // oldest key under NAME/ (the holder) in the same revision.
  pb::TxnResponse create_waiter_key(const std::string& name, std::int64_t lease) {
    const std::string own_key = name + "/" + lease_hex(lease);
    pb::TxnRequest request;
    pb::Compare* absent = request.add_compare();
    absent->set_key(own_key);
    absent->set_target(pb::Compare::CREATE);
    absent->set_result(pb::Compare::EQUAL);
    absent->set_create_revision(0);
    pb::PutRequest* create = request.add_success()->mutable_request_put();
    create->set_key(own_key);
    create->set_lease(lease);
    pb::RangeRequest* own = request.add_failure()->mutable_request_range();
    own->set_key(own_key);
    for (auto* ops : {request.mutable_success(), request.mutable_failure()}) {
      pb::RangeRequest* holder = ops->Add()->mutable_request_range();
      holder->set_key(name + "/");
      holder->set_range_end(prefix_end(name + "/"));
      holder->set_sort_target(pb::RangeRequest::CREATE);
      holder->set_sort_order(pb::RangeRequest::ASCEND);
      holder->set_limit(1);
    }
    pb::TxnResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv_->Txn(&context, request, &response);
    EXPECT_TRUE(status.ok()) << "Txn: " << describe(status);
    return response;
  }

  static EtcdCluster* cluster_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::KV::Stub> kv_;
  std::unique_ptr<pb::Watch::Stub> watch_;
  std::unique_ptr<pb::Lease::Stub> lease_;
  std::unique_ptr<electionpb::Election::Stub> election_;
};

EtcdCluster* EtcdWire::cluster_ = nullptr;

TEST_F(EtcdWire, PutThenRangeReturnsTheValueAndItsRevisions) {
  pb::PutResponse written = put("wire/kv", "v1");
  const std::int64_t revision = written.header().revision();
  EXPECT_GT(revision, 0);
  EXPECT_NE(written.header().cluster_id(), 0u);
  EXPECT_NE(written.header().member_id(), 0u);
  EXPECT_GT(written.header().raft_term(), 0u);

  pb::RangeResponse read = range("wire/kv");
  ASSERT_EQ(read.kvs_size(), 1);
  EXPECT_EQ(read.count(), 1);
  EXPECT_EQ(read.kvs(0).key(), "wire/kv");
  EXPECT_EQ(read.kvs(0).value(), "v1");
  EXPECT_EQ(read.kvs(0).create_revision(), revision);
  EXPECT_EQ(read.kvs(0).mod_revision(), revision);
  EXPECT_EQ(read.kvs(0).version(), 1);
  EXPECT_EQ(read.kvs(0).lease(), 0);
  EXPECT_GE(read.header().revision(), revision);
}

TEST_F(EtcdWire, TxnComparesCreateRevisionAndRunsTheMatchingBranch) {
  const std::int64_t created = put("wire/txn", "first").header().revision();
  auto txn = [&](std::int64_t expected_create_revision) {
    pb::TxnRequest request;
    pb::Compare* compare = request.add_compare();
    compare->set_key("wire/txn");
    compare->set_target(pb::Compare::CREATE);
    compare->set_result(pb::Compare::EQUAL);
    compare->set_create_revision(expected_create_revision);
    pb::PutRequest* overwrite = request.add_success()->mutable_request_put();
    overwrite->set_key("wire/txn");
    overwrite->set_value("second");
    request.add_failure()->mutable_request_range()->set_key("wire/txn");
    pb::TxnResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv_->Txn(&context, request, &response);
    EXPECT_TRUE(status.ok()) << describe(status);
    return response;
  };

  pb::TxnResponse failed = txn(0);  // "create only if absent" on a present key
  EXPECT_FALSE(failed.succeeded());
  ASSERT_EQ(failed.responses_size(), 1);
  ASSERT_TRUE(failed.responses(0).has_response_range());
  ASSERT_EQ(failed.responses(0).response_range().kvs_size(), 1);
  EXPECT_EQ(failed.responses(0).response_range().kvs(0).create_revision(), created);
  EXPECT_EQ(failed.header().revision(), created) << "a failed compare must not write";

  pb::TxnResponse succeeded = txn(created);
  EXPECT_TRUE(succeeded.succeeded());
  ASSERT_EQ(succeeded.responses_size(), 1);
  EXPECT_TRUE(succeeded.responses(0).has_response_put());
  EXPECT_GT(succeeded.header().revision(), created);
  pb::RangeResponse read = range("wire/txn");
  ASSERT_EQ(read.kvs_size(), 1);
  EXPECT_EQ(read.kvs(0).value(), "second");
  EXPECT_EQ(read.kvs(0).create_revision(), created) << "an overwrite keeps the create revision";
  EXPECT_EQ(read.kvs(0).version(), 2);
}

TEST_F(EtcdWire, PrefixRangeSortsByCreateRevisionAndDeleteRangeRemovesThePrefix) {
  put("wire/prefix/b", "created first");
  put("wire/prefix/a", "created second");
  put("wire/prefiy", "outside the prefix");

  pb::RangeResponse all = range("wire/prefix/", /*prefix=*/true);
  ASSERT_EQ(all.kvs_size(), 2);
  EXPECT_EQ(all.kvs(0).key(), "wire/prefix/b");
  EXPECT_EQ(all.kvs(1).key(), "wire/prefix/a");

  pb::RangeRequest limited;
  limited.set_key("wire/prefix/");
  limited.set_range_end(prefix_end("wire/prefix/"));
  limited.set_limit(1);
  limited.set_keys_only(true);
  pb::RangeResponse first;
  {
    grpc::ClientContext context;
    set_deadline(context);
    ASSERT_TRUE(kv_->Range(&context, limited, &first).ok());
  }
  ASSERT_EQ(first.kvs_size(), 1);
  EXPECT_TRUE(first.more());
  EXPECT_EQ(first.count(), 2);
  EXPECT_EQ(first.kvs(0).key(), "wire/prefix/a") << "default order is by key";
  EXPECT_TRUE(first.kvs(0).value().empty()) << "keys_only";

  pb::DeleteRangeRequest erase;
  erase.set_key("wire/prefix/");
  erase.set_range_end(prefix_end("wire/prefix/"));
  erase.set_prev_kv(true);
  pb::DeleteRangeResponse erased;
  {
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv_->DeleteRange(&context, erase, &erased);
    ASSERT_TRUE(status.ok()) << describe(status);
  }
  EXPECT_EQ(erased.deleted(), 2);
  EXPECT_EQ(erased.prev_kvs_size(), 2);
  EXPECT_EQ(range("wire/prefix/", /*prefix=*/true).kvs_size(), 0);
  EXPECT_EQ(range("wire/prefiy").kvs_size(), 1);
}

TEST_F(EtcdWire, LeaseGrantKeepAliveRevokeAndTheAttachedKeyGoesWithTheLease) {
  const std::int64_t id = grant_lease(5);
  ASSERT_NE(id, 0);
  put("wire/leased", "v", id);
  pb::RangeResponse read = range("wire/leased");
  ASSERT_EQ(read.kvs_size(), 1);
  EXPECT_EQ(read.kvs(0).lease(), id);

  pb::LeaseTimeToLiveResponse ttl = time_to_live(id);
  EXPECT_EQ(ttl.id(), id);
  EXPECT_EQ(ttl.grantedttl(), 5);
  EXPECT_GT(ttl.ttl(), 0);
  EXPECT_LE(ttl.ttl(), 5);
  ASSERT_EQ(ttl.keys_size(), 1);
  EXPECT_EQ(ttl.keys(0), "wire/leased");

  pb::LeaseLeasesResponse leases;
  {
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = lease_->LeaseLeases(&context, pb::LeaseLeasesRequest(), &leases);
    ASSERT_TRUE(status.ok()) << describe(status);
  }
  bool listed = false;
  for (const auto& lease : leases.leases()) listed = listed || lease.id() == id;
  EXPECT_TRUE(listed) << "LeaseLeases does not list the granted lease";

  pb::LeaseKeepAliveResponse renewed = keep_alive_once(id);
  EXPECT_EQ(renewed.id(), id);
  EXPECT_EQ(renewed.ttl(), 5);

  grpc::Status revoked = revoke_lease(id);
  ASSERT_TRUE(revoked.ok()) << describe(revoked);
  EXPECT_EQ(range("wire/leased").kvs_size(), 0) << "revoking the lease deletes its keys";
  EXPECT_EQ(time_to_live(id).ttl(), -1);
  EXPECT_EQ(keep_alive_once(id).ttl(), 0) << "TTL 0 is how a keep-alive reports a lost lease";
  grpc::Status again = revoke_lease(id);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND) << describe(again);
}

TEST_F(EtcdWire, WatchReportsCreationThenPutAndDeleteEvents) {
  grpc::ClientContext context;
  set_deadline(context);
  auto stream = watch_->Watch(&context);
  pb::WatchRequest create;
  create.mutable_create_request()->set_key("wire/watched");
  create.mutable_create_request()->set_prev_kv(true);
  ASSERT_TRUE(stream->Write(create));
  pb::WatchResponse created;
  ASSERT_TRUE(stream->Read(&created));
  EXPECT_TRUE(created.created());
  EXPECT_EQ(created.events_size(), 0);
  const std::int64_t watch_id = created.watch_id();

  const std::int64_t put_revision = put("wire/watched", "hello").header().revision();
  pb::WatchResponse on_put;
  ASSERT_TRUE(stream->Read(&on_put));
  EXPECT_EQ(on_put.watch_id(), watch_id);
  ASSERT_EQ(on_put.events_size(), 1);
  EXPECT_EQ(on_put.events(0).type(), pb::Event::PUT);
  EXPECT_EQ(on_put.events(0).kv().key(), "wire/watched");
  EXPECT_EQ(on_put.events(0).kv().value(), "hello");
  EXPECT_EQ(on_put.events(0).kv().mod_revision(), put_revision);

  {
    pb::DeleteRangeRequest erase;
    erase.set_key("wire/watched");
    pb::DeleteRangeResponse erased;
    grpc::ClientContext delete_context;
    set_deadline(delete_context);
    ASSERT_TRUE(kv_->DeleteRange(&delete_context, erase, &erased).ok());
  }
  pb::WatchResponse on_delete;
  ASSERT_TRUE(stream->Read(&on_delete));
  ASSERT_EQ(on_delete.events_size(), 1);
  EXPECT_EQ(on_delete.events(0).type(), pb::Event::DELETE);
  EXPECT_EQ(on_delete.events(0).kv().key(), "wire/watched");
  EXPECT_EQ(on_delete.events(0).prev_kv().value(), "hello");

  pb::WatchRequest cancel;
  cancel.mutable_cancel_request()->set_watch_id(watch_id);
  ASSERT_TRUE(stream->Write(cancel));
  pb::WatchResponse canceled;
  ASSERT_TRUE(stream->Read(&canceled));
  EXPECT_TRUE(canceled.canceled());
  EXPECT_EQ(canceled.watch_id(), watch_id);
  // etcd 3.4 keeps a Watch stream open after the client's WritesDone() (unlike LeaseKeepAlive):
  // a client ends it by cancelling the call.
  context.TryCancel();
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << describe(status);
}

TEST_F(EtcdWire, ElectionCampaignProclaimObserveResignUseTheMutexKeyLayout) {
  const std::int64_t lease = grant_lease(10);
  electionpb::CampaignRequest campaign;
  campaign.set_name("wire-election");
  campaign.set_lease(lease);
  campaign.set_value("first");
  electionpb::CampaignResponse campaigned;
  {
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = election_->Campaign(&context, campaign, &campaigned);
    ASSERT_TRUE(status.ok()) << describe(status);
  }
  const electionpb::LeaderKey& leader = campaigned.leader();
  EXPECT_EQ(leader.name(), "wire-election");
  EXPECT_EQ(leader.key(), "wire-election/" + lease_hex(lease));
  EXPECT_EQ(leader.lease(), lease);
  EXPECT_GT(leader.rev(), 0);

  auto current_leader = [&] {
    electionpb::LeaderRequest request;
    request.set_name("wire-election");
    electionpb::LeaderResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = election_->Leader(&context, request, &response);
    EXPECT_TRUE(status.ok()) << describe(status);
    return response;
  };
  EXPECT_EQ(current_leader().kv().value(), "first");
  EXPECT_EQ(current_leader().kv().create_revision(), leader.rev());

  electionpb::ProclaimRequest proclaim;
  *proclaim.mutable_leader() = leader;
  proclaim.set_value("second");
  electionpb::ProclaimResponse proclaimed;
  {
    grpc::ClientContext context;
    set_deadline(context);
    ASSERT_TRUE(election_->Proclaim(&context, proclaim, &proclaimed).ok());
  }
  EXPECT_EQ(current_leader().kv().value(), "second");

  {
    grpc::ClientContext context;
    set_deadline(context);
    electionpb::LeaderRequest request;
    request.set_name("wire-election");
    auto observe = election_->Observe(&context, request);
    electionpb::LeaderResponse observed;
    ASSERT_TRUE(observe->Read(&observed));
    EXPECT_EQ(observed.kv().key(), leader.key());
    EXPECT_EQ(observed.kv().value(), "second");
    context.TryCancel();
    observe->Finish();  // CANCELLED, by the line above
  }

  electionpb::ResignRequest resign;
  *resign.mutable_leader() = leader;
  electionpb::ResignResponse resigned;
  {
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = election_->Resign(&context, resign, &resigned);
    ASSERT_TRUE(status.ok()) << describe(status);
  }
  EXPECT_EQ(range("wire-election/", /*prefix=*/true).kvs_size(), 0);
  EXPECT_TRUE(revoke_lease(lease).ok());
}

TEST_F(EtcdWire, EtcdctlLockKeyIsNameSlashLeaseHexAndOrdersWaitersByCreateRevision) {
  const std::string dir = make_temp_dir("fencelock-etcdctl-lock-");
  const std::string output = dir + "/out";
  const std::string release = dir + "/release";
  // etcdctl holds the lock until the command exits; the command exits once `release` exists.
  auto holder = ChildProcess::spawn(
      {"etcdctl", "--endpoints=" + cluster_->endpoints(), "lock", "wire-lock", "--", "sh", "-c",
       fmt::format("echo \"$ETCD_LOCK_KEY $ETCD_LOCK_REV\"; "
                   "while [ ! -e '{}' ]; do sleep 0.05; done",
                   release)},
      {"ETCDCTL_API=3"}, output);
  std::string lock_key;
  std::int64_t lock_rev = 0;
  for (auto until = Clock::now() + 20s; Clock::now() < until && lock_key.empty();) {
    std::ifstream in(output);
    in >> lock_key >> lock_rev;
    if (lock_key.empty()) std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(lock_key.empty()) << "etcdctl lock printed nothing within 20 s";

  pb::RangeResponse held = range("wire-lock/", /*prefix=*/true);
  ASSERT_EQ(held.kvs_size(), 1);
  const pb::KeyValue& etcdctl_key = held.kvs(0);
  EXPECT_EQ(etcdctl_key.key(), lock_key);
  EXPECT_EQ(etcdctl_key.key(), "wire-lock/" + lease_hex(etcdctl_key.lease()));
  EXPECT_EQ(etcdctl_key.create_revision(), lock_rev) << "ETCD_LOCK_REV is the create revision";
  EXPECT_EQ(time_to_live(etcdctl_key.lease()).grantedttl(), 10) << "etcdctl's session TTL";

  // A second contender the way fencelock's mutex will take its place in line.
  const std::int64_t own_lease = grant_lease(10);
  pb::TxnResponse queued = create_waiter_key("wire-lock", own_lease);
  EXPECT_TRUE(queued.succeeded()) << "the own key did not exist yet";
  ASSERT_EQ(queued.responses_size(), 2);
  const auto& owner = queued.responses(1).response_range();
  ASSERT_EQ(owner.kvs_size(), 1);
  EXPECT_EQ(owner.kvs(0).key(), lock_key) << "etcdctl's older key holds the lock";
  EXPECT_GT(queued.header().revision(), lock_rev);

  std::ofstream(release).put('\n');
  auto exit_code = holder.wait_for(15s);
  ASSERT_TRUE(exit_code.has_value()) << "etcdctl lock did not exit after its command";
  EXPECT_EQ(*exit_code, 0);

  pb::RangeResponse after = range("wire-lock/", /*prefix=*/true);
  ASSERT_EQ(after.kvs_size(), 1) << "etcdctl's key must be gone with its session";
  EXPECT_EQ(after.kvs(0).key(), "wire-lock/" + lease_hex(own_lease));
  pb::TxnResponse again = create_waiter_key("wire-lock", own_lease);
  EXPECT_FALSE(again.succeeded()) << "the own key exists: the Txn must not create it twice";
  ASSERT_EQ(again.responses_size(), 2);
  ASSERT_EQ(again.responses(1).response_range().kvs_size(), 1);
  EXPECT_EQ(again.responses(1).response_range().kvs(0).key(), after.kvs(0).key())
      << "with etcdctl gone, the own key is the oldest: the holder";
  EXPECT_EQ(again.responses(1).response_range().kvs(0).create_revision(),
            again.responses(0).response_range().kvs(0).create_revision());

  EXPECT_TRUE(revoke_lease(own_lease).ok());
  remove_tree(dir);
}

// Auth needs its own cluster: enabling it would change every other test's calls.
TEST(EtcdWireAuth, AuthenticateReturnsATokenThatAuthorizesCallsInTheTokenMetadata) {
  auto cluster = EtcdCluster::start(1);
  cluster->enable_auth("alice", "s3cret");
  auto channel = insecure_channel(cluster->client_endpoint(0));
  auto auth = pb::Auth::NewStub(channel);
  auto kv = pb::KV::NewStub(channel);

  auto authenticate = [&](const std::string& password, pb::AuthenticateResponse& response) {
    pb::AuthenticateRequest request;
    request.set_name("alice");
    request.set_password(password);
    grpc::ClientContext context;
    set_deadline(context);
    return auth->Authenticate(&context, request, &response);
  };
  pb::AuthenticateResponse rejected;
  EXPECT_FALSE(authenticate("wrong", rejected).ok());
  pb::AuthenticateResponse accepted;
  grpc::Status status = authenticate("s3cret", accepted);
  ASSERT_TRUE(status.ok()) << describe(status);
  ASSERT_FALSE(accepted.token().empty());

  pb::PutRequest request;
  request.set_key("wire/auth");
  request.set_value("by alice");
  pb::PutResponse response;
  {
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status anonymous = kv->Put(&context, request, &response);
    EXPECT_FALSE(anonymous.ok()) << "a call without token must be refused";
  }
  {
    grpc::ClientContext context;
    set_deadline(context);
    context.AddMetadata("token", accepted.token());
    grpc::Status with_token = kv->Put(&context, request, &response);
    EXPECT_TRUE(with_token.ok()) << describe(with_token);
  }
  EXPECT_EQ(cluster->etcdctl({"get", "wire/auth", "--print-value-only"}), "by alice\n");
}

// The fault controls of the cluster helper that the etcd backend's failover tests use.
TEST(EtcdClusterHelper, LeaderMovesOnPauseAndKillAndARestartedMemberRejoinsWithItsData) {
  auto cluster = EtcdCluster::start(3);
  auto put_via = [&](int member, const std::string& key) {
    auto kv = pb::KV::NewStub(insecure_channel(cluster->client_endpoint(member)));
    pb::PutRequest request;
    request.set_key(key);
    request.set_value("v");
    pb::PutResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    return kv->Put(&context, request, &response);
  };
  auto serializable_count_at = [&](int member, const std::string& key) {
    auto kv = pb::KV::NewStub(insecure_channel(cluster->client_endpoint(member)));
    pb::RangeRequest request;
    request.set_key(key);
    request.set_serializable(true);  // what this member has, without asking the leader
    pb::RangeResponse response;
    grpc::ClientContext context;
    set_deadline(context);
    grpc::Status status = kv->Range(&context, request, &response);
    EXPECT_TRUE(status.ok()) << describe(status);
    return response.count();
  };

  const int first = cluster->leader();
  cluster->pause(first);
  const int second = cluster->leader();
  EXPECT_NE(second, first) << "a paused leader is replaced";
  grpc::Status written = put_via(second, "helper/while-paused");
  EXPECT_TRUE(written.ok()) << describe(written);
  cluster->resume(first);

  const pid_t old_pid = cluster->pid(second);
  cluster->kill(second);
  const int third = cluster->leader();
  EXPECT_NE(third, second) << "a killed leader is replaced";
  cluster->restart(second);
  EXPECT_NE(cluster->pid(second), old_pid);
  EXPECT_EQ(serializable_count_at(second, "helper/while-paused"), 1)
      << "the restarted member kept its data directory";
  written = put_via(second, "helper/after-restart");
  EXPECT_TRUE(written.ok()) << describe(written);
  EXPECT_NO_THROW(cluster->etcdctl({"endpoint", "health"}));  // it reports on stderr
}

}  // namespace
}  // namespace fencelock::testing

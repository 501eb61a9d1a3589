// The etcd harness: a fresh 3-member etcd cluster per test.
//
// acquire_attempts counts the cluster's revision: every acquisition attempt that takes a place in
// line writes its own key (one revision), and a waiter that polled by re-trying would keep
// writing. server_waiters counts the keys in line for the lock (NAME/<lease hex>) other than the
// holder's: each remote waiter owns exactly one.
#include <grpcpp/grpcpp.h>

#include <stdexcept>

#include "conformance/harness.h"
#include "etcd/etcd_keys.h"
#include "etcd/fencelock_etcd.grpc.pb.h"
#include "support/etcd_cluster.h"

namespace fencelock::testing {
namespace {

namespace pb = fencelock::etcdserverpb;

class EtcdHarness final : public Harness {
 public:
  EtcdHarness() : cluster_(EtcdCluster::start(3)) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    kv_ = pb::KV::NewStub(grpc::CreateCustomChannel(cluster_->client_endpoint(0),
                                                    grpc::InsecureChannelCredentials(), arguments));
  }
  std::string uri() override { return cluster_->uri(); }
  std::chrono::milliseconds short_ttl() const override { return std::chrono::milliseconds(2000); }

  long long acquire_attempts(const std::string& key) override {
    return range(key, /*count_only=*/true).header().revision();
  }
  long long server_waiters(const std::string& key) override {
    pb::RangeResponse keys = range(key, /*count_only=*/false);
    long long in_line = 0;
    for (const auto& kv : keys.kvs()) {
      if (detail::etcd::lock_name_of(kv.key()) == key) ++in_line;
    }
    return in_line > 0 ? in_line - 1 : 0;
  }

 private:
  pb::RangeResponse range(const std::string& key, bool count_only) {
    pb::RangeRequest request;
    request.set_key(detail::etcd::lock_prefix(key));
    request.set_range_end(detail::etcd::prefix_end(detail::etcd::lock_prefix(key)));
    request.set_keys_only(true);
    request.set_count_only(count_only);
    pb::RangeResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status = kv_->Range(&context, request, &response);
    if (!status.ok())
      throw std::runtime_error("etcd harness Range failed: " + status.error_message());
    return response;
  }

  std::unique_ptr<EtcdCluster> cluster_;
  std::unique_ptr<pb::KV::Stub> kv_;
};

}  // namespace

std::unique_ptr<Harness> make_etcd_harness() { return std::make_unique<EtcdHarness>(); }

}  // namespace fencelock::testing

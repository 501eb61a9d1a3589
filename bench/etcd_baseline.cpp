#include "etcd_baseline.h"

#include <stdexcept>

#include <fmt/format.h>

#include "etcd/etcd_keys.h"
#include "redis_baseline.h"  // endpoints_of

namespace fencelock::bench {

namespace pb = fencelock::etcdserverpb;

namespace {

std::string first_endpoint(const std::string& uri) { return endpoints_of(uri).at(0); }

}  // namespace

EtcdBaseline::EtcdBaseline(const std::string& uri) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  channel_ =
      grpc::CreateCustomChannel(first_endpoint(uri), grpc::InsecureChannelCredentials(), arguments);
  kv_ = pb::KV::NewStub(channel_);
  lease_stub_ = pb::Lease::NewStub(channel_);
  pb::LeaseGrantRequest request;
  request.set_ttl(30);
  pb::LeaseGrantResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status = lease_stub_->LeaseGrant(&context, request, &response);
  if (!status.ok()) {
    throw std::runtime_error(fmt::format("etcd baseline: lease grant on {}: {}",
                                         first_endpoint(uri), status.error_message()));
  }
  lease_ = response.id();
  lease_hex_ = detail::etcd::lease_hex(lease_);
}

EtcdBaseline::~EtcdBaseline() {
  pb::LeaseRevokeRequest request;
  request.set_id(lease_);
  pb::LeaseRevokeResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  (void)lease_stub_->LeaseRevoke(&context, request, &response);
}

bool EtcdBaseline::cycle(const std::string& name) {
  const std::string prefix = detail::etcd::lock_prefix(name), key = prefix + lease_hex_;
  pb::TxnRequest acquire;
  pb::Compare* absent = acquire.add_compare();
  absent->set_key(key);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = acquire.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value("baseline");
  put->set_lease(lease_);
  pb::RangeRequest* line = acquire.add_success()->mutable_request_range();
  line->set_key(prefix);
  line->set_range_end(detail::etcd::prefix_end(prefix));
  line->set_sort_target(pb::RangeRequest::CREATE);
  line->set_sort_order(pb::RangeRequest::ASCEND);
  line->set_limit(8);
  acquire.add_failure()->mutable_request_range()->set_key(key);
  pb::TxnResponse acquired;
  {
    grpc::ClientContext context;
    if (!kv_->Txn(&context, acquire, &acquired).ok() || !acquired.succeeded()) return false;
  }
  const std::int64_t revision = acquired.header().revision();
  const auto& first = acquired.responses(1).response_range();
  const bool granted = first.kvs_size() > 0 && first.kvs(0).create_revision() == revision;

  pb::TxnRequest release;
  pb::Compare* mine = release.add_compare();
  mine->set_key(key);
  mine->set_target(pb::Compare::CREATE);
  mine->set_result(pb::Compare::EQUAL);
  mine->set_create_revision(revision);
  release.add_success()->mutable_request_delete_range()->set_key(key);
  pb::TxnResponse released;
  grpc::ClientContext context;
  return kv_->Txn(&context, release, &released).ok() && granted;
}

}  // namespace fencelock::bench

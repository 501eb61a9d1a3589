// The bare-gRPC baseline for etcd: the same two calls per cycle as fencelock's etcd mutex on an
// uncontended key (one Txn "create the own key if absent, then read the line", one Txn "delete
// the own key if it still has my create revision"), on one channel to the first endpoint, with
// one lease granted up front (as fencelock's session) and nothing else: no failover, no local
// queue, no renewer, no deadlines beyond gRPC's.
//
// Thread-safety: cycle() may run on many threads at once (gRPC stubs are thread-safe); each
// thread must use its own keys.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "etcd/fencelock_etcd.grpc.pb.h"

namespace fencelock::bench {

class EtcdBaseline {
 public:
  // `uri`: etcd://h1:p1[,h2:p2...] without credentials. Throws std::runtime_error when the first
  // endpoint does not answer or the lease cannot be granted.
  explicit EtcdBaseline(const std::string& uri);
  ~EtcdBaseline();
  EtcdBaseline(const EtcdBaseline&) = delete;
  EtcdBaseline& operator=(const EtcdBaseline&) = delete;

  // One acquire + release of `name` (own key name/<lease hex>). False when not granted.
  bool cycle(const std::string& name);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fencelock::etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<fencelock::etcdserverpb::Lease::Stub> lease_stub_;
  std::int64_t lease_ = 0;
  std::string lease_hex_;
};

}  // namespace fencelock::bench

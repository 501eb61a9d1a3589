// fencelock's etcd messages live in their own protobuf package and C++ namespace
// (fencelock::etcdserverpb, src/etcd/fencelock_etcd.proto), so a program can link fencelock
// beside another etcd client that declares etcd's own etcdserverpb messages. With fencelock's
// classes in etcdserverpb this binary did not link (two etcdserverpb::RangeRequest) and, linked,
// protobuf would abort at start on the second registration of etcdserverpb.RangeRequest.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "etcd/fencelock_etcd.pb.h"
#include "other_etcd_client/etcd/etcd.pb.h"

namespace {

TEST(EtcdProtoIsolation, FencelocksMessagesAndAnotherEtcdClientsLiveSideBySide) {
  etcdserverpb::RangeRequest theirs;
  theirs.set_key("k");
  fencelock::etcdserverpb::RangeRequest ours;
  ours.set_key("k");
  EXPECT_EQ(theirs.GetDescriptor()->full_name(), "etcdserverpb.RangeRequest");
  EXPECT_EQ(ours.GetDescriptor()->full_name(), "fencelock.etcdserverpb.RangeRequest");
  EXPECT_NE(theirs.GetDescriptor()->file()->name(), ours.GetDescriptor()->file()->name());

  // Both are etcd's wire format: the same field numbers, so the bytes agree.
  EXPECT_EQ(theirs.SerializeAsString(), ours.SerializeAsString());
  fencelock::etcdserverpb::RangeRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(theirs.SerializeAsString()));
  EXPECT_EQ(parsed.key(), "k");

  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  ASSERT_NE(pool->FindMessageTypeByName("etcdserverpb.RangeRequest"), nullptr);
  EXPECT_EQ(pool->FindMessageTypeByName("etcdserverpb.RangeRequest")->field_count(), 3);
  ASSERT_NE(pool->FindServiceByName("fencelock.etcdserverpb.KV"), nullptr);
}

}  // namespace

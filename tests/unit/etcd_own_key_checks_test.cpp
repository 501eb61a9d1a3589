// The own-key checks of an etcd renewal round (src/etcd/etcd_own_keys.h): one Txn of
// "create_revision(key) == token" compares per 128 keys (etcd's default --max-txn-ops), whose
// failure branch reads every key, and the reading of its answer: a key is still held only when
// it is there with the create revision it was granted with.
#include "etcd/etcd_own_keys.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fencelock::detail::etcd {
namespace {

std::vector<OwnKey> keys(std::size_t n) {
  std::vector<OwnKey> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(OwnKey{"lock" + std::to_string(i) + "/1f", static_cast<std::int64_t>(100 + i)});
  }
  return out;
}

TEST(EtcdOwnKeyChecks, OneTxnOfCompareAndReadPer128KeysInOrder) {
  EXPECT_TRUE(own_key_checks({}).empty());
  const std::vector<OwnKey> held = keys(300);
  const std::vector<pb::TxnRequest> checks = own_key_checks(held);
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[0].compare_size(), 128);
  EXPECT_EQ(checks[1].compare_size(), 128);
  EXPECT_EQ(checks[2].compare_size(), 300 - 256);
  std::size_t next = 0;
  for (const auto& check : checks) {
    EXPECT_EQ(check.success_size(), 0) << "a check writes nothing";
    ASSERT_EQ(check.failure_size(), check.compare_size());
    for (int i = 0; i < check.compare_size(); ++i, ++next) {
      const pb::Compare& compare = check.compare(i);
      EXPECT_EQ(compare.key(), held[next].key);
      EXPECT_EQ(compare.target(), pb::Compare::CREATE);
      EXPECT_EQ(compare.result(), pb::Compare::EQUAL);
      EXPECT_EQ(compare.create_revision(), held[next].revision);
      const pb::RangeRequest& read = check.failure(i).request_range();
      EXPECT_EQ(read.key(), held[next].key);
      EXPECT_TRUE(read.range_end().empty()) << "one key, not a range";
      EXPECT_TRUE(read.keys_only());
    }
  }
  EXPECT_EQ(next, held.size());
}

TEST(EtcdOwnKeyChecks, AKeyIsStillHeldOnlyWithItsCreateRevision) {
  const std::vector<OwnKey> held = keys(4);
  const pb::TxnRequest check = own_key_checks(held).front();

  pb::TxnResponse all_there;
  all_there.set_succeeded(true);
  EXPECT_EQ(still_held(check, all_there), std::vector<bool>(4, true));

  pb::TxnResponse some_gone;
  some_gone.set_succeeded(false);
  auto read = [&](const std::string& key, std::int64_t revision) {
    pb::RangeResponse* range = some_gone.add_responses()->mutable_response_range();
    if (revision == 0) return;  // deleted: the read finds nothing
    pb::KeyValue* kv = range->add_kvs();
    kv->set_key(key);
    kv->set_create_revision(revision);
  };
  read(held[0].key, held[0].revision);      // still there
  read(held[1].key, 0);                     // deleted (etcdctl del)
  read(held[2].key, held[2].revision + 7);  // deleted and created again: another key
  // No read for held[3]: an answer that lacks a key says nothing is held.
  EXPECT_EQ(still_held(check, some_gone), (std::vector<bool>{true, false, false, false}));
}

}  // namespace
}  // namespace fencelock::detail::etcd

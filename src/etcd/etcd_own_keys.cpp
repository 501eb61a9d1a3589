#include "etcd/etcd_own_keys.h"

#include <algorithm>

namespace fencelock::detail::etcd {

std::vector<pb::TxnRequest> own_key_checks(std::span<const OwnKey> keys) {
  std::vector<pb::TxnRequest> checks;
  for (std::size_t first = 0; first < keys.size(); first += kMaxCompares) {
    pb::TxnRequest& check = checks.emplace_back();
    const std::size_t end = std::min(keys.size(), first + kMaxCompares);
    for (std::size_t i = first; i < end; ++i) {
      pb::Compare* compare = check.add_compare();
      compare->set_key(keys[i].key);
      compare->set_target(pb::Compare::CREATE);
      compare->set_result(pb::Compare::EQUAL);
      compare->set_create_revision(keys[i].revision);
      pb::RangeRequest* read = check.add_failure()->mutable_request_range();
      read->set_key(keys[i].key);
      read->set_keys_only(true);
    }
  }
  return checks;
}

std::vector<bool> still_held(const pb::TxnRequest& check, const pb::TxnResponse& response) {
  const auto keys = static_cast<std::size_t>(check.compare_size());
  if (response.succeeded()) return std::vector<bool>(keys, true);
  std::vector<bool> held(keys, false);
  for (std::size_t i = 0; i < keys && i < static_cast<std::size_t>(response.responses_size());
       ++i) {
    const int at = static_cast<int>(i);
    const pb::RangeResponse& read = response.responses(at).response_range();
    held[i] = read.kvs_size() > 0 && read.kvs(0).key() == check.compare(at).key() &&
              read.kvs(0).create_revision() == check.compare(at).create_revision();
  }
  return held;
}

}  // namespace fencelock::detail::etcd

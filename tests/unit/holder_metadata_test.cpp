// Specification of the holder metadata rule (src/core/holder_metadata.h) and of etcd's stored
// value around it (src/etcd/etcd_keys.h): metadata is a JSON object nested at most
// kMaxMetadataNesting deep. Deeper JSON overflowed the stack where nlohmann::json copies and
// dumps it (found by fuzz/fuzz_metadata.cpp; fuzz/corpus/fuzz_metadata/deep_nesting).
#include "core/holder_metadata.h"

#include <gtest/gtest.h>

#include <string>

#include "etcd/etcd_keys.h"

namespace fencelock::detail {
namespace {

// {"a":[[...]]}: an object whose arrays nest `depth` levels in all.
std::string nested(std::size_t depth) {
  return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
}

TEST(HolderMetadata, AJsonObjectIsAccepted) {
  EXPECT_TRUE(validate_holder_metadata("{\"host\":\"a\",\"pid\":7}").ok());
  EXPECT_TRUE(validate_holder_metadata(nested(kMaxMetadataNesting)).ok());
}

TEST(HolderMetadata, AnythingButAJsonObjectIsInvalid) {
  for (const char* text :
       {"[1,2]", "\"text\"", "7", "null", "{\"a\":", "host=a", "{\"a\":\"\xff\"}"}) {
    EXPECT_EQ(validate_holder_metadata(text).code(), Code::kInvalidArgument) << text;
  }
}

TEST(HolderMetadata, NestingDeeperThanTheLimitIsInvalid) {
  EXPECT_EQ(validate_holder_metadata(nested(kMaxMetadataNesting + 1)).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(validate_holder_metadata(nested(20'000)).code(), Code::kInvalidArgument);
}

TEST(JsonNesting, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(json_nesting_within("{\"a\":\"[[[[\"}", 1));
  EXPECT_TRUE(json_nesting_within("{\"a\\\"[[\":1}", 1));
  EXPECT_FALSE(json_nesting_within("{\"a\":[1]}", 1));
  EXPECT_TRUE(json_nesting_within("{\"a\":[1]}", 2));
  EXPECT_TRUE(json_nesting_within("]]]]", 0));
}

TEST(EtcdValue, DeepMetadataIsStoredAsTextAndADeepValueIsForeign) {
  const std::string deep = nested(20'000);
  const etcd::DecodedValue stored = etcd::decode_value(etcd::encode_value("1a2b3c4d", deep));
  EXPECT_EQ(stored.owner_prefix, "1a2b3c4d");
  EXPECT_EQ(stored.metadata, deep);
  const etcd::DecodedValue foreign =
      etcd::decode_value("{\"owner\":\"1a2b3c4d\",\"metadata\":" + deep + "}");
  EXPECT_EQ(foreign.owner_prefix, "");
}

TEST(EtcdValue, MetadataWithinTheLimitIsEmbedded) {
  const etcd::DecodedValue value =
      etcd::decode_value(etcd::encode_value("1a2b3c4d", "{\"host\":\"a\",\"pid\":7}"));
  EXPECT_EQ(value.owner_prefix, "1a2b3c4d");
  EXPECT_EQ(value.metadata, "{\"host\":\"a\",\"pid\":7}");
}

}  // namespace
}  // namespace fencelock::detail

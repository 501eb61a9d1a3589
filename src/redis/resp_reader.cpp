#include "redis/resp_reader.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace fencelock::detail::redis {
namespace {

// The reply objects are built as hiredis 0.14 builds them (calloc'd redisReply, malloc'd
// strings, calloc'd element arrays), so that freeReplyObject frees them; what differs is that
// each allocation is first charged to the reply's budget (the reader's privdata).

bool charge(const redisReadTask* task, std::size_t bytes, const char* what, long long count) {
  auto* budget = static_cast<ReplyBudget*>(task->privdata);
  if (bytes > kMaxReplyBytes || budget->used > kMaxReplyBytes - bytes) {
    budget->refused =
        fmt::format("{} of {} would take the reply past {} MiB", what, count, kMaxReplyBytes >> 20);
    return false;
  }
  budget->used += bytes;
  return true;
}

redisReply* make_object(int type) {
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r == nullptr) return nullptr;
  r->type = type;
  return r;
}

// Links `r` into its parent array (hiredis fills an array's slots as their items arrive).
void* attach(const redisReadTask* task, redisReply* r) {
  if (r != nullptr && task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

void* create_string(const redisReadTask* task, char* str, std::size_t len) {
  if (!charge(task, sizeof(redisReply) + len + 1, "a string", static_cast<long long>(len))) {
    return nullptr;
  }
  redisReply* r = make_object(task->type);
  if (r == nullptr) return nullptr;
  r->str = static_cast<char*>(std::malloc(len + 1));
  if (r->str == nullptr) {
    std::free(r);
    return nullptr;
  }
  std::memcpy(r->str, str, len);
  r->str[len] = '\0';
  r->len = len;
  return attach(task, r);
}

void* create_array(const redisReadTask* task, int elements) {
  if (elements < 0) {
    static_cast<ReplyBudget*>(task->privdata)->refused =
        fmt::format("an array of {} elements", elements);
    return nullptr;
  }
  const auto count = static_cast<std::size_t>(elements);
  if (!charge(task, sizeof(redisReply) + count * sizeof(redisReply*), "an array", elements)) {
    return nullptr;
  }
  redisReply* r = make_object(REDIS_REPLY_ARRAY);
  if (r == nullptr) return nullptr;
  if (count > 0) {
    r->element = static_cast<redisReply**>(std::calloc(count, sizeof(redisReply*)));
    if (r->element == nullptr) {
      std::free(r);
      return nullptr;
    }
  }
  r->elements = count;
  return attach(task, r);
}

void* create_integer(const redisReadTask* task, long long value) {
  if (!charge(task, sizeof(redisReply), "an integer", value)) return nullptr;
  redisReply* r = make_object(REDIS_REPLY_INTEGER);
  if (r == nullptr) return nullptr;
  r->integer = value;
  return attach(task, r);
}

void* create_nil(const redisReadTask* task) {
  if (!charge(task, sizeof(redisReply), "a nil", 0)) return nullptr;
  return attach(task, make_object(REDIS_REPLY_NIL));
}

void free_object(void* reply) { freeReplyObject(reply); }

redisReplyObjectFunctions bounded_functions = {create_string, create_array, create_integer,
                                               create_nil, free_object};

}  // namespace

RespReader::RespReader() : reader_(redisReaderCreateWithFunctions(&bounded_functions)) {
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->privdata = &budget_;  // handed to every create function (via each read task)
}

RespReader::~RespReader() { redisReaderFree(reader_); }

Status RespReader::failed(std::string why) {
  if (error_.ok()) error_ = Status(Code::kUnavailable, std::move(why));
  return error_;
}

Status RespReader::feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  if (buffered() + bytes.size() > kMaxReplyBytes) {
    return failed(fmt::format("the server sent a reply of more than {} MiB without finishing it",
                              kMaxReplyBytes >> 20));
  }
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK) {
    return failed("out of memory buffering a reply");
  }
  return Status::Ok();
}

Result<Reply> RespReader::next() {
  if (!error_.ok()) return error_;
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    if (!budget_.refused.empty()) {
      return failed(fmt::format("the server sent a reply fencelock refuses: {}", budget_.refused));
    }
    return failed(fmt::format("the server broke the protocol: {}", reader_->errstr));
  }
  if (raw == nullptr) return Reply();
  budget_.used = 0;  // the next reply starts with its whole budget
  return Reply(static_cast<redisReply*>(raw));
}

std::size_t RespReader::buffered() const { return reader_->len - reader_->pos; }

}  // namespace fencelock::detail::redis

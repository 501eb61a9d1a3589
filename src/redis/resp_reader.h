// RespReader: hiredis's RESP parser (redisReader, no I/O) with a bound on what one reply may make
// fencelock allocate. Pure: bytes go in with feed(), replies come out of next(); nothing here
// reads or writes a socket.
//
// Why the bound: hiredis 0.14 reserves an array's element pointers when it reads the array's
// header, so a 13-byte answer `*2147483647\r\n` from a broken or hostile server made it reserve
// 16 GiB, and freeing that reply walked 2^31 pointers (10-18 s of a renewal thread). (Counts
// below -1 or above INT_MAX Debian's hiredis 0.14.1 refuses itself; the create functions here
// refuse a negative count too, should a build not.) Here every
// reply has a budget of kMaxReplyBytes for everything the parser builds for it (each object, each
// string, each array's pointers), counted before anything is allocated, and the bytes buffered
// but not yet parsed are held to the same bound (a bulk string announced as 2 GiB). A reply over
// budget, a count below -1 or a protocol error ends the stream: the connection is unusable after
// it (the caller closes it) and the error says what the server sent.
//
// Thread-safety: one thread at a time (it is part of one connection).
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::detail::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
// A parsed reply (the layout of hiredis's redisReply; freed with freeReplyObject).
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// The most one reply may make the reader allocate, and the most bytes it buffers unparsed. The
// largest replies fencelock reads are a page of `list` and a batch of renewal votes: kilobytes.
inline constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

// What the reply being parsed has allocated so far (the reader's privdata).
struct ReplyBudget {
  std::size_t used = 0;
  std::string refused;  // why the last allocation was refused, for the error message
};

class RespReader {
 public:
  RespReader();
  ~RespReader();
  RespReader(const RespReader&) = delete;
  RespReader& operator=(const RespReader&) = delete;

  // Appends bytes from the server. Not OK (kUnavailable) once more than kMaxReplyBytes would
  // wait unparsed, or after an earlier error.
  Status feed(std::string_view bytes);
  // The next complete reply: a Reply, or null when more bytes are needed. Not OK (kUnavailable,
  // naming what the server sent) on a protocol error or a reply over budget; every later call
  // returns the same error.
  Result<Reply> next();

  // Bytes fed but not yet parsed.
  std::size_t buffered() const;

 private:
  Status failed(std::string why);

  ReplyBudget budget_;
  redisReader* reader_;
  Status error_;
};

}  // namespace fencelock::detail::redis

// RedisFence (fencelock/fence.h): one blocking hiredis connection, serialized by a mutex,
// reopened after a failure. The guards are fence_set.lua (write) and fence_get.lua (fenced read),
// run with EVALSHA (loaded on connect); a NOSCRIPT reply (SCRIPT FLUSH, a restarted server
// reached by an old connection) is answered by EVAL of the full script, which reloads it.

#include <fmt/format.h>

#include "core/fence_issuer.h"
#include "core/mutex.h"
#include "core/token_text.h"
#include "core/uri.h"
#include "fencelock/fence.h"
#include "redis/connection.h"
#include "redis/redis_options.h"
#include "redis_scripts.h"

namespace fencelock {

namespace redis = detail::redis;

struct RedisFence::Impl {
  redis::ConnectSpec spec;
  ClientOptions options;
  detail::Mutex mu;
  redis::ConnectionPtr connection FENCELOCK_GUARDED_BY(mu);  // null after a failure

  // Runs one command; reconnects first when needed. kUnavailable on I/O failure.
  Result<redis::Reply> command(const std::vector<std::string>& args) {
    detail::MutexLock lock(mu);
    const auto deadline = detail::Clock::now() + options.connect_timeout + options.io_timeout;
    if (!connection) {
      auto opened = redis::open_connection(spec, deadline);
      if (!opened.ok()) return opened.status();
      connection = std::move(*opened);
    }
    auto answered = redis::run_command(
        *connection, args, std::min(deadline, detail::Clock::now() + options.io_timeout));
    if (!answered.ok()) {
      connection->abort();
      connection.reset();
      return Status(answered.status().code(),
                    fmt::format("fence: {}", answered.status().message()));
    }
    redis::Reply reply = std::move(*answered);
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string_view text(reply->str, reply->len);
      Status st = redis::status_from_error_reply(text, "fence");
      // The fence script's own errors (a record that is not what fencelock writes) are kInternal
      // (fence.h): unlike a lock's instance, a fence has no majority to fall back on.
      if (st.code() == Code::kUnavailable && text.find("fencelock: ") != std::string_view::npos) {
        return Status(Code::kInternal, std::string(st.message()));
      }
      return st;
    }
    return reply;
  }

  // EVALSHA of `script`, or EVAL of its source when the server no longer has it cached.
  Result<redis::Reply> run_script(std::string_view script, std::string_view sha1,
                                  std::vector<std::string> keys_and_args) {
    std::vector<std::string> args = {"EVALSHA", std::string(sha1), "2"};
    args.insert(args.end(), keys_and_args.begin(), keys_and_args.end());
    auto reply = command(args);
    if (reply.ok() || reply.status().message().find("NOSCRIPT") == std::string::npos) return reply;
    args[0] = "EVAL";
    args[1] = std::string(script);
    return command(args);
  }
};

Result<RedisFence> RedisFence::connect(std::string_view uri, const ClientOptions& options) {
  auto parsed = detail::parse_uri(uri, 6379);
  if (!parsed.ok()) return parsed.status();
  if (parsed->scheme != "redis" || parsed->endpoints.size() != 1) {
    return Status(Code::kInvalidArgument,
                  "RedisFence needs redis://host:port (one instance holds the resource)");
  }
  auto specs = redis::connect_specs(*parsed, options.connect_timeout);
  if (!specs.ok()) return specs.status();
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->spec = std::move(specs->front());
  impl->spec.scripts = {detail::lua::fence_set, detail::lua::fence_get};
  auto query = redis::parse_redis_options(*parsed);  // the backends' reading of the options
  if (!query.ok()) return query.status();
  const bool allow_eviction = query->allow_eviction;
  const auto deadline = detail::Clock::now() + options.connect_timeout + options.io_timeout;
  auto opened = redis::open_connection(impl->spec, deadline);
  if (!opened.ok()) return opened.status();
  if (Status policy = redis::check_eviction_policy(**opened, allow_eviction, deadline);
      !policy.ok()) {
    return policy;
  }
  {
    detail::MutexLock lock(impl->mu);  // not shared yet; the lock is for the analysis
    impl->connection = std::move(*opened);
  }
  return RedisFence(std::move(impl));
}

namespace {
std::string fence_key(std::string_view key) { return "fencelock:fence:" + std::string(key); }

// Data keys may not live in fencelock's namespace: "fencelock:fence:K" is K's fence record and
// "fencelock:{K}:fence" a lock's counter, and a write to either would reset it.
Status check_data_key(std::string_view key) {
  if (key.starts_with("fencelock:")) {
    return Status(Code::kInvalidArgument,
                  fmt::format("RedisFence: the data key '{}' is in fencelock's own namespace "
                              "(fencelock:), where fence records and lock counters live; choose "
                              "another name",
                              key.substr(0, 60)));
  }
  if (key.empty()) return Status(Code::kInvalidArgument, "RedisFence: the data key is empty");
  return Status::Ok();
}

std::string text(const redisReply* r) { return std::string(r->str, r->len); }

Status not_a_record(std::string_view key) {
  return Status(Code::kInternal,
                fmt::format("the fence record {} is not a canonical token, optionally followed by "
                            "a space and an issuer; it was written by something other than "
                            "fencelock (an administrator can reset it: docs/PROTOCOLS.md, "
                            "\"Fences\")",
                            fence_key(key)));
}

// A token read back from Redis: kInternal unless it is a canonical token (tokens.lua's rule:
// "0" or no leading zero, digits only, within uint64).
Result<FencingToken> token_from_reply(const redisReply* r, std::string_view key) {
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
    if (auto token = detail::parse_canonical_token(std::string_view(r->str, r->len))) {
      return FencingToken(*token);
    }
  } else if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0) {
    return FencingToken(static_cast<std::uint64_t>(r->integer));
  }
  return not_a_record(key);
}

// A whole record ("<token>" or "<token> <issuer>", fence_record.lua) as GET returns it.
Result<Fencing> record_from_text(std::string_view record, std::string_view key) {
  const std::size_t space = record.find(' ');
  auto token = detail::parse_canonical_token(record.substr(0, space));
  if (!token) return not_a_record(key);
  if (space == std::string_view::npos) return Fencing{FencingToken(*token), ""};
  const std::string_view issuer = record.substr(space + 1);
  if (issuer.empty() || !detail::check_issuer(issuer, "RedisFence").ok()) return not_a_record(key);
  return Fencing{FencingToken(*token), std::string(issuer)};
}

// {1, x} / {0, highest} / {2, highest, issuer} from fence_set.lua or fence_get.lua.
Status check_shape(const redisReply* r) {
  const bool ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->elements <= 3 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER &&
                  ((r->element[0]->integer == 1 && r->elements <= 2) ||
                   (r->element[0]->integer == 0 && r->elements == 2) ||
                   (r->element[0]->integer == 2 && r->elements == 3 &&
                    r->element[2]->type == REDIS_REPLY_STRING));
  if (!ok) return Status(Code::kInternal, "unexpected reply from the fence script");
  return Status::Ok();
}

// The refusal a {0, ...} or {2, ...} reply stands for.
Status refusal(const redisReply* r, const Fencing& presented, std::string_view key) {
  auto highest = token_from_reply(r->element[1], key);
  if (!highest.ok()) return highest.status();
  if (r->element[0]->integer == 0) return stale_token(presented.token, *highest);
  return other_lock(presented, Fencing{*highest, text(r->element[2])});
}

// Checks shared by the fenced calls: the data key and the issuer.
Status check_call(std::string_view key, const Fencing& fencing) {
  if (Status st = check_data_key(key); !st.ok()) return st;
  return detail::check_issuer(fencing.issuer, "RedisFence");
}
}  // namespace

Status RedisFence::set(const ResourceKey& key, std::string_view value, const Fencing& fencing) {
  const std::string_view name = key.str();
  if (Status st = check_call(name, fencing); !st.ok()) return st;
  auto reply =
      impl_->run_script(detail::lua::fence_set, detail::lua::fence_set_sha1,
                        {std::string(name), fence_key(name), std::to_string(fencing.token.value()),
                         std::string(value), fencing.issuer});
  if (!reply.ok()) return reply.status();
  const redisReply* r = reply->get();
  if (Status shape = check_shape(r); !shape.ok()) return shape;
  if (r->element[0]->integer == 1) return Status::Ok();
  return refusal(r, fencing, name);
}

Status RedisFence::set(const ResourceKey& key, std::string_view value, FencingToken token) {
  return set(key, value, Fencing{token, ""});
}

Result<std::optional<std::string>> RedisFence::get(const ResourceKey& key, const Fencing& fencing) {
  const std::string_view name = key.str();
  if (Status st = check_call(name, fencing); !st.ok()) return st;
  auto reply = impl_->run_script(
      detail::lua::fence_get, detail::lua::fence_get_sha1,
      {std::string(name), fence_key(name), std::to_string(fencing.token.value()), fencing.issuer});
  if (!reply.ok()) return reply.status();
  const redisReply* r = reply->get();
  if (Status shape = check_shape(r); !shape.ok()) return shape;
  if (r->element[0]->integer != 1) return refusal(r, fencing, name);
  // Lua drops a trailing nil from a table: a missing name is a one-element reply.
  if (r->elements < 2 || r->element[1]->type == REDIS_REPLY_NIL) {
    return std::optional<std::string>();
  }
  if (r->element[1]->type != REDIS_REPLY_STRING) {
    return Status(Code::kInternal, fmt::format("the fenced read of {} found no string", name));
  }
  return std::optional<std::string>(text(r->element[1]));
}

Result<std::optional<std::string>> RedisFence::get(const ResourceKey& key, FencingToken token) {
  return get(key, Fencing{token, ""});
}

Result<std::optional<std::string>> RedisFence::peek(const ResourceKey& key) {
  const std::string_view name = key.str();
  if (Status st = check_data_key(name); !st.ok()) return st;
  auto reply = impl_->command({"GET", std::string(name)});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if ((*reply)->type != REDIS_REPLY_STRING) {
    return Status(Code::kInternal, fmt::format("unexpected reply to GET {}", name));
  }
  return std::optional<std::string>(text(reply->get()));
}

Result<Fencing> RedisFence::record(const ResourceKey& key) {
  const std::string_view name = key.str();
  if (Status st = check_data_key(name); !st.ok()) return st;
  auto reply = impl_->command({"GET", fence_key(name)});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_NIL) return Fencing{FencingToken(0), ""};
  if ((*reply)->type != REDIS_REPLY_STRING) return not_a_record(name);
  return record_from_text(text(reply->get()), name);
}

Result<FencingToken> RedisFence::highest(const ResourceKey& key) {
  auto found = record(key);
  if (!found.ok()) return found.status();
  return found->token;
}

Status RedisFence::adopt(const ResourceKey& key, const Fencing& fencing) {
  const std::string_view name = key.str();
  if (Status st = check_call(name, fencing); !st.ok()) return st;
  std::string record = std::to_string(fencing.token.value());
  if (!fencing.issuer.empty()) record += " " + fencing.issuer;
  auto reply = impl_->command({"SET", fence_key(name), record});
  return reply.ok() ? Status::Ok() : reply.status();
}

Status RedisFence::reset(const ResourceKey& key) {
  const std::string_view name = key.str();
  if (Status st = check_data_key(name); !st.ok()) return st;
  auto reply = impl_->command({"DEL", fence_key(name)});
  return reply.ok() ? Status::Ok() : reply.status();
}

std::string_view RedisFence::script() { return detail::lua::fence_set; }

std::string_view RedisFence::read_script() { return detail::lua::fence_get; }

}  // namespace fencelock

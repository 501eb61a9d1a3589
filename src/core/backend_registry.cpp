#include "core/backend_registry.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "core/mutex.h"
#include "core/uri.h"

namespace fencelock::detail {

namespace {

class Registry {
 public:
  Registry() : plugins_(builtin_backend_plugins()) {}

  std::vector<const BackendPlugin*> all() const {
    MutexLock lock(mu_);
    return plugins_;
  }

  Status add(const BackendPlugin& plugin) {
    if (plugin.schemes.empty() || plugin.connect == nullptr) {
      return Status(Code::kInvalidArgument,
                    "a backend plugin needs a scheme and a connect function");
    }
    MutexLock lock(mu_);
    for (std::string_view scheme : plugin.schemes) {
      const bool lower = std::none_of(scheme.begin(), scheme.end(), [](char c) {
        return std::isupper(static_cast<unsigned char>(c)) != 0;
      });
      if (scheme.empty() || !lower) {
        return Status(Code::kInvalidArgument,
                      fmt::format("backend scheme '{}' must be non-empty and lower case", scheme));
      }
      if (find_locked(scheme) != nullptr) {
        return Status(Code::kInvalidArgument,
                      fmt::format("backend scheme '{}://' is registered already", scheme));
      }
    }
    plugins_.push_back(&plugin);
    return Status::Ok();
  }

  const BackendPlugin* find(std::string_view lowered) const {
    MutexLock lock(mu_);
    return find_locked(lowered);
  }

 private:
  const BackendPlugin* find_locked(std::string_view lowered) const FENCELOCK_REQUIRES(mu_) {
    for (const BackendPlugin* plugin : plugins_) {
      for (std::string_view scheme : plugin->schemes) {
        if (scheme == lowered) return plugin;
      }
    }
    return nullptr;
  }

  mutable Mutex mu_;
  std::vector<const BackendPlugin*> plugins_ FENCELOCK_GUARDED_BY(mu_);
};

Registry& registry() {
  static Registry instance;  // NOLINT(fuchsia-statically-constructed-objects): built on first use
  return instance;
}

}  // namespace

std::vector<const BackendPlugin*> backend_plugins() { return registry().all(); }

const BackendPlugin* find_backend_plugin(std::string_view uri) {
  auto scheme = scheme_of(uri);
  if (!scheme.ok()) return nullptr;
  const BackendPlugin* plugin = registry().find(*scheme);
  if (plugin != nullptr && plugin->lowercase_only && !uri.starts_with(*scheme)) return nullptr;
  return plugin;
}

Result<const BackendPlugin*> backend_for_uri(std::string_view uri) {
  auto scheme = scheme_of(uri);
  if (!scheme.ok()) return scheme.status();  // no scheme, or characters no scheme has
  if (const BackendPlugin* plugin = find_backend_plugin(uri)) return plugin;
  return unknown_scheme(uri.substr(0, uri.find("://")));  // as typed
}

bool known_scheme(std::string_view scheme) { return registry().find(scheme) != nullptr; }

Status unknown_scheme(std::string_view scheme) {
  return Status(Code::kInvalidArgument,
                fmt::format("unknown backend scheme '{}://' (use {})", scheme, scheme_list()));
}

Status register_backend_plugin(const BackendPlugin& plugin) { return registry().add(plugin); }

std::string scheme_list() {
  std::vector<std::string> names;
  for (const BackendPlugin* plugin : backend_plugins()) {
    for (std::string_view scheme : plugin->schemes) names.push_back(fmt::format("{}://", scheme));
  }
  if (names.empty()) return "none";
  if (names.size() == 1) return names.front();
  std::string out;
  for (std::size_t i = 0; i + 1 < names.size(); ++i) out += (i == 0 ? "" : ", ") + names[i];
  return out + " or " + names.back();
}

}  // namespace fencelock::detail

// connect_store(): URL -> Store backend (memory://NAME, tcp://HOST:PORT, redis://HOST:PORT,
// etcd://[USER@]HOST:PORT[,HOST:PORT...]).
#include <map>
#include <mutex>
#include <vector>

#include "common/host_port.h"
#include "edl/error.h"
#include "edl/store.h"
#include "elastic/store/etcd_store.h"
#include "elastic/store/redis_store.h"
#include "elastic/store/tcp_store_client.h"

namespace edl {
namespace {

std::shared_ptr<Store> named_memory_store(const std::string& name) {
  static std::mutex mu;
  static auto* registry = new std::map<std::string, std::shared_ptr<Store>>();  // process lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto& s = (*registry)[name];
  if (!s) s = make_memory_store();
  return s;
}

}  // namespace

std::shared_ptr<Store> connect_store(const std::string& url, const StoreOptions& options) {
  size_t sep = url.find("://");
  if (sep == std::string::npos)
    throw InvalidArgument("store URL '" + url + "' is malformed: missing scheme (memory://, tcp://, redis:// or etcd://)");
  std::string scheme = url.substr(0, sep);
  std::string rest = url.substr(sep + 3);
  if (scheme == "memory") {
    if (rest.empty()) throw InvalidArgument("store URL '" + url + "' is malformed: memory:// needs a NAME");
    return named_memory_store(rest);
  }
  if (scheme == "tcp" || scheme == "redis") {
    std::string host;
    int port = 0;
    if (std::string why = split_host_port(rest, &host, &port); !why.empty())
      throw InvalidArgument("store URL '" + url + "' is malformed: " + why + " (expected SCHEME://HOST:PORT)");
    if (scheme == "tcp") return store::connect_tcp_store(host, port, options);
    return store::connect_redis_store(host, port, options);
  }
  if (scheme == "etcd") {
    std::string user;  // etcd://USER@HOST:PORT,...: authenticate as USER with the job secret
    size_t at = rest.find('@');
    if (at != std::string::npos) {
      user = rest.substr(0, at);
      rest = rest.substr(at + 1);
      if (user.empty() || user.find_first_of(":/,") != std::string::npos)
        throw InvalidArgument("store URL '" + url + "' is malformed: the etcd user before '@' must be a non-empty "
                              "name (the password is the job secret)");
    }
    std::vector<store::EtcdEndpoint> endpoints;
    size_t start = 0;
    for (;;) {
      size_t comma = rest.find(',', start);
      store::EtcdEndpoint ep;
      if (std::string why = split_host_port(rest.substr(start, comma - start), &ep.host, &ep.port); !why.empty())
        throw InvalidArgument("store URL '" + url + "' is malformed: " + why +
                              " (expected etcd://[USER@]HOST:PORT[,HOST:PORT...])");
      endpoints.push_back(ep);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return store::connect_etcd_store(url, std::move(endpoints), user, options);
  }
  throw InvalidArgument("store URL '" + url + "' has unknown scheme '" + scheme +
                        "' (expected memory://, tcp://, redis:// or etcd://)");
}

}  // namespace edl

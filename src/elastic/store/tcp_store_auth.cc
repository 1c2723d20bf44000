#include "elastic/store/tcp_store_auth.h"

namespace edl::store {

std::string auth_mac(std::string_view secret, std::string_view nonce) {
  std::string msg = "edl-store-v1";
  msg.append(nonce.data(), nonce.size());
  Digest d = hmac_sha256(secret, msg);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace edl::store

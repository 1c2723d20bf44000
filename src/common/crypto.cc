#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <climits>

#include "edl/error.h"

namespace edl::crypto {
namespace {

std::string openssl_error(const char* what) {
  char buf[256];
  ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
  return std::string(what) + " failed: " + buf;
}

}  // namespace

Digest sha256(std::string_view data) {
  Digest out;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data());
  return out;
}

Digest hmac_sha256(std::string_view key, std::string_view message) {
  if (key.size() > static_cast<size_t>(INT_MAX)) throw InvalidArgument("HMAC key longer than 2 GiB");
  Digest out;
  unsigned int len = 0;
  // A null key pointer with length 0 makes OpenSSL reuse a previous key: pass a valid pointer.
  static const unsigned char kEmpty = 0;
  const unsigned char* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (!HMAC(EVP_sha256(), k, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
            message.size(), out.data(), &len) ||
      len != out.size())
    throw InternalError(openssl_error("HMAC-SHA256"));
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > static_cast<size_t>(INT_MAX)) throw InvalidArgument("random_bytes: too many bytes requested");
  if (n && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    throw InternalError(openssl_error("RAND_bytes"));
  return out;
}

}  // namespace edl::crypto

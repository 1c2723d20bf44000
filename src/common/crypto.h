// Cryptographic primitives of EDL, backed by OpenSSL's libcrypto: SHA-256, HMAC-SHA256, a
// constant-time compare and random bytes from the kernel CSPRNG.
//
// Used by the two job-secret handshakes: the embedded TCP store's AUTH (src/elastic/store/tcp_store_auth.h,
// docs/store.md) and the collective mesh hello (src/collective/mesh_handshake.h, docs/collectives.md).
// Both prove the job secret with HMAC-SHA256 over a fresh nonce; the secret never crosses the wire.
// Thread-safety: pure functions (libcrypto >= 1.1 is thread-safe without setup).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "edl/export.h"

namespace edl::crypto {

using Digest = std::array<uint8_t, 32>;

EDL_API Digest sha256(std::string_view data);
// HMAC-SHA256 (RFC 2104 / RFC 4231); any key length.
EDL_API Digest hmac_sha256(std::string_view key, std::string_view message);

// Equal-length comparison whose time does not depend on where the inputs differ (CRYPTO_memcmp);
// different lengths compare unequal.
EDL_API bool constant_time_equal(std::string_view a, std::string_view b);

// n bytes from the kernel CSPRNG (RAND_bytes, seeded by getrandom); throws InternalError if it fails.
EDL_API std::string random_bytes(size_t n);

}  // namespace edl::crypto

// Job-secret proof for the embedded TCP store.
//
// The handshake (docs/store.md): the server opens every connection with a HELLO frame carrying a
// fresh 32-byte random nonce; the client's first frame must be AUTH carrying
// HMAC-SHA256(key = job secret, message = "edl-store-v1" || nonce). The server recomputes the MAC and
// compares in constant time. The secret itself never crosses the wire and a captured AUTH frame
// cannot be replayed on another connection (new nonce each time). The primitives are libcrypto's
// (src/common/crypto.h); their names are re-exported here for the store code.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/crypto.h"

namespace edl::store {

using crypto::constant_time_equal;
using crypto::Digest;
using crypto::hmac_sha256;
using crypto::random_bytes;
using crypto::sha256;

// The MAC a client sends for a server nonce.
std::string auth_mac(std::string_view secret, std::string_view nonce);

}  // namespace edl::store

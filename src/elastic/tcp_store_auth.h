// Job-secret proof for the embedded TCP store: SHA-256, HMAC-SHA256 and a constant-time compare.
//
// The handshake (docs/store.md): the server opens every connection with a HELLO frame carrying a
// fresh 32-byte random nonce; the client's first frame must be AUTH carrying
// HMAC-SHA256(key = job secret, message = "edl-store-v1" || nonce). The server recomputes the MAC and
// compares in constant time. The secret itself never crosses the wire and a captured AUTH frame
// cannot be replayed on another connection (new nonce each time).
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace edl::store {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);

// The MAC a client sends for a server nonce.
std::string auth_mac(std::string_view secret, std::string_view nonce);

// Equal-length comparison whose time does not depend on where the inputs differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// n bytes from the kernel CSPRNG (getrandom / /dev/urandom); throws InternalError if unavailable.
std::string random_bytes(size_t n);

}  // namespace edl::store

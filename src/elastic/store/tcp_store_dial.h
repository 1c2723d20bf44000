// Opening one authenticated connection to the embedded TCP store: connect (non-blocking, with a
// deadline), read HELLO, answer with AUTH (HMAC of the job secret over the server's nonce, plus the
// client id that keys the server's replay journal), read AUTH_OK. Used by the client
// (tcp_store_client.cc) for the first connection and for every reconnect.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <chrono>
#include <string>

#include "elastic/store/tcp_store_frame.h"

namespace edl::store {

struct DialTarget {
  std::string host;
  int port = 0;
  std::string addr;       // "tcp://HOST:PORT", used in every message
  std::string secret;
  std::string client_id;  // sent in AUTH (key field)
};

// Connects and authenticates within `timeout`; when `retry` is set, a refused connection or a
// failed handshake (other than a rejected secret) is retried every 50 ms until then (the server may
// still be starting, or shedding a flood). Returns a blocking fd with TCP_NODELAY;
// *reader holds any bytes read past AUTH_OK. Throws StoreError (unreachable, timeout, not an EDL
// store) or AuthError (secret rejected), each naming the address.
int dial_store(const DialTarget& t, std::chrono::milliseconds timeout, bool retry, FrameReader* reader);

}  // namespace edl::store

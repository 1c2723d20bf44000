// The embedded TCP store's connections: admission (connection caps), reading under the pre-auth
// byte budget, the HMAC handshake, back-pressure, output and closing (docs/store.md, "Limits").
// Runs on the loop thread only.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/host_port.h"
#include "common/logging.h"
#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_server_impl.h"

namespace edl {

using store::Message;
using store::Op;

void StoreServer::Impl::accept_all() {
  while (accept_one()) {
  }
}

// Accepts one pending connection; false when there is none (or accept failed).
bool StoreServer::Impl::accept_one() {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  int fd = accept4(listenfd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EINTR) return true;
    if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
      // Out of descriptors: free the spare one to accept and shed the connection, so the listener
      // does not stay readable forever (level-triggered epoll would spin).
      ::close(spare_fd_);
      int shed = accept4(listenfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (shed >= 0) ::close(shed);
      spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      ++refused_;
      EDL_LOG(1) << "store server: out of file descriptors; a new connection was closed";
      return shed >= 0;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      EDL_LOG(1) << "store server: accept failed: " << errno_text(errno);
    }
    return false;
  }
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
  std::string peer = std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
  if (conns_.size() >= opts_.max_connections) {
    ++refused_;
    EDL_LOG(2) << "store server: refusing " << peer << ": " << conns_.size() << " connections open (max_connections)";
    ::close(fd);
    return true;
  }
  if (unauthenticated_.size() >= opts_.max_unauthenticated) evict_oldest_unauthenticated();
  admit(fd, peer);
  return true;
}

void StoreServer::Impl::admit(int fd, const std::string& peer) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The pre-auth frame limit: nothing larger than the budget can be an AUTH frame.
  auto c = std::make_unique<Conn>(std::min(opts_.max_unauthenticated_bytes, opts_.max_frame_bytes));
  c->fd = fd;
  c->id = next_conn_id_++;
  c->peer = peer;
  c->nonce = store::random_bytes(store::kNonceBytes);
  add_fd(fd, c->id, EPOLLIN);
  handshake_deadlines_.emplace(Clock::now() + opts_.handshake_timeout, c->id);
  unauthenticated_.insert(c->id);
  Conn& ref = *c;
  conns_.emplace(c->id, std::move(c));
  nconns_ = conns_.size();
  Message hello;
  hello.op = Op::kHello;
  hello.value = store::kProtocolMagic;
  hello.opt = ref.nonce;
  send(ref, hello);
}

// Too many connections in the handshake: the oldest goes (a legitimate client authenticates within
// one round trip; one that lingers is the likeliest to be hostile, and a client reconnects anyway).
void StoreServer::Impl::evict_oldest_unauthenticated() {
  while (!unauthenticated_.empty() && unauthenticated_.size() >= opts_.max_unauthenticated) {
    uint64_t id = *unauthenticated_.begin();
    unauthenticated_.erase(unauthenticated_.begin());
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead) continue;
    ++refused_;
    EDL_LOG(2) << "store server: closing unauthenticated connection from " << it->second->peer << ": "
               << opts_.max_unauthenticated << " connections are in the handshake (max_unauthenticated)";
    close_conn(*it->second);
  }
}

// How many bytes the next recv may take: unbounded chunks once authenticated, otherwise what is left
// of the pre-auth budget.
size_t StoreServer::Impl::read_budget(const Conn& c) const {
  if (c.authed) return SIZE_MAX;
  return c.preauth_bytes >= opts_.max_unauthenticated_bytes ? 0 : opts_.max_unauthenticated_bytes - c.preauth_bytes;
}

void StoreServer::Impl::on_readable(Conn& c) {
  char buf[65536];
  for (;;) {
    size_t budget = read_budget(c);
    if (budget == 0) {
      ++refused_;
      EDL_LOG(1) << "store server: closing connection from " << c.peer << ": sent "
                 << opts_.max_unauthenticated_bytes << " bytes without authenticating";
      c.dead = true;
      return;
    }
    ssize_t r = ::recv(c.fd, buf, std::min(sizeof(buf), budget), 0);
    if (r > 0) {
      if (!c.authed) c.preauth_bytes += static_cast<size_t>(r);
      if (!c.reader.feed(buf, static_cast<size_t>(r))) {
        // The frames before the bad header are still served; then the connection goes.
        drain_frames(c);
        bad_frame(c, c.reader.error());
        return;
      }
      drain_frames(c);
      if (c.dead || c.close_after_flush || c.paused) return;
      continue;
    }
    if (r == 0) {
      if (c.reader.pending_bytes() > 0) {
        EDL_LOG(2) << "store server: " << c.peer << " closed mid-frame (" << c.reader.pending_bytes()
                   << " bytes of a truncated frame dropped)";
      }
      c.dead = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
    return;
  }
}

void StoreServer::Impl::drain_frames(Conn& c) {
  std::string body;
  while (!c.dead && !c.close_after_flush) {
    if (pending_output(c) >= opts_.max_pending_output_bytes) {
      pause(c);  // resumed by flush() once the client has read its replies
      return;
    }
    if (!c.reader.next(&body)) break;
    std::string err;
    auto m = store::decode_message(body, &err);
    if (!m) {
      bad_frame(c, err);
      return;
    }
    if (!c.authed) {
      authenticate(c, *m);
    } else {
      handle(c, std::move(*m));
    }
  }
}

void StoreServer::Impl::bad_frame(Conn& c, const std::string& why) {
  ++bad_frames_;
  EDL_LOG(1) << "store server: closing connection from " << c.peer << ": malformed frame (" << why << ")";
  c.dead = true;
}

void StoreServer::Impl::authenticate(Conn& c, const Message& m) {
  bool ok = m.op == Op::kAuth && store::constant_time_equal(m.value, store::auth_mac(opts_.secret, c.nonce));
  Message reply;
  if (ok) {
    c.authed = true;
    unauthenticated_.erase(c.id);
    c.reader.set_max_frame_bytes(opts_.max_frame_bytes);
    open_session(c, m.key);
    reply.op = Op::kAuthOk;
    send(c, reply);
    return;
  }
  ++rejected_auth_;
  std::string why = m.op == Op::kAuth ? "wrong or missing job secret (EDL_JOB_SECRET)"
                                      : std::string("first frame was ") + store::op_name(m.op) +
                                            ", not AUTH: the job secret was not proved";
  EDL_LOG(1) << "store server: rejected connection from " << c.peer << ": " << why;
  reply.op = Op::kAuthFail;
  reply.value = why;
  send(c, reply);
  c.close_after_flush = true;
  if (c.out_off == c.out.size()) c.dead = true;
}

void StoreServer::Impl::pause(Conn& c) {
  if (c.paused) return;
  c.paused = true;
  ++throttled_;
  update_events(c);
  EDL_LOG(2) << "store server: " << c.peer << " is not reading its replies (" << pending_output(c)
             << " bytes queued); its requests wait";
}

// Connections whose queue drained below the limit continue with the requests they already sent.
void StoreServer::Impl::resume_paused() {
  for (auto& kv : conns_) {
    Conn& c = *kv.second;
    if (!c.paused || c.dead || pending_output(c) >= opts_.max_pending_output_bytes / 2) continue;
    c.paused = false;
    update_events(c);
    try {
      drain_frames(c);
      if (!c.paused && !c.dead) on_readable(c);  // bytes that arrived while paused
    } catch (const std::exception& e) {
      EDL_LOG(0) << "store server: closing connection from " << c.peer << " after an internal error: " << e.what();
      c.dead = true;
    }
  }
}

void StoreServer::Impl::expire_handshakes(Clock::time_point now) {
  while (!handshake_deadlines_.empty() && handshake_deadlines_.begin()->first <= now) {
    uint64_t id = handshake_deadlines_.begin()->second;
    handshake_deadlines_.erase(handshake_deadlines_.begin());
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->authed || it->second->dead) continue;
    ++rejected_auth_;
    EDL_LOG(1) << "store server: closing connection from " << it->second->peer << ": no AUTH within "
               << opts_.handshake_timeout.count() << " ms";
    it->second->dead = true;
  }
}

void StoreServer::Impl::send(Conn& c, const Message& m) {
  if (c.dead) return;
  c.out += store::encode_frame(m);
  flush(c);
}

void StoreServer::Impl::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (w > 0) {
      c.out_off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_writing(c, true);
      return;
    }
    c.dead = true;
    return;
  }
  c.out.clear();
  c.out_off = 0;
  set_writing(c, false);
  if (c.close_after_flush) c.dead = true;
}

void StoreServer::Impl::set_writing(Conn& c, bool on) {
  if (c.writing == on) return;
  c.writing = on;
  update_events(c);
}

void StoreServer::Impl::update_events(Conn& c) {
  epoll_event ev{};
  ev.events = (c.paused ? 0u : uint32_t(EPOLLIN)) | (c.writing ? uint32_t(EPOLLOUT) : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
}

// Marks c closed now (its descriptor is released by reap()) and stops reading from it.
void StoreServer::Impl::close_conn(Conn& c) {
  c.dead = true;
  c.paused = true;
  c.writing = false;
  update_events(c);
}

void StoreServer::Impl::reap() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = *it->second;
    if (!c.dead) {
      ++it;
      continue;
    }
    std::vector<uint64_t> ws(c.waiters.begin(), c.waiters.end());
    for (uint64_t wid : ws) remove_waiter(wid);
    if (Session* s = session_of(c)) --s->conns;
    unauthenticated_.erase(c.id);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    it = conns_.erase(it);
  }
  nconns_ = conns_.size();
}

}  // namespace edl

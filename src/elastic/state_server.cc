// The survivor's state server of stop-free joins (state_server.h).
#include "elastic/state_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collective/socket.h"
#include "common/logging.h"
#include "edl/error.h"
#include "elastic/snapshot.h"
#include "elastic/state_wire.h"

namespace edl::elastic {

namespace wire = state_wire;

StateServer::StateServer(StateServerOptions o) : o_(std::move(o)) {
  int port = 0;
  listen_fd_ = collective::listen_any_port(o_.bind_address, &port);
  collective::set_nonblocking(listen_fd_, true);
  address_ = (o_.bind_address.find(':') != std::string::npos ? "[" + o_.bind_address + "]" : o_.bind_address) + ":" +
             std::to_string(port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

StateServer::~StateServer() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      c->close.store(true);
      ::shutdown(c->fd, SHUT_RDWR);
    }
    cv_.notify_all();
  }
  if (acceptor_.joinable()) acceptor_.join();
  reap(/*all=*/true);
  ::close(listen_fd_);
}

void StateServer::set_generation(uint64_t generation, int rank, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation != generation_) {
    for (auto& c : conns_) {  // a newcomer of an earlier generation abandoned its catch-up
      c->close.store(true);
      ::shutdown(c->fd, SHUT_RDWR);
    }
  }
  generation_ = generation;
  rank_ = rank;
  size_ = size;
  cv_.notify_all();
}

void StateServer::boundary(int64_t step, std::shared_ptr<const std::string> commit) {
  std::lock_guard<std::mutex> lock(mu_);
  boundary_step_ = step;
  if (commit) replace_commit(step, std::move(commit));
  cv_.notify_all();
}

void StateServer::publish(int64_t step, std::shared_ptr<const std::string> commit) {
  std::lock_guard<std::mutex> lock(mu_);
  replace_commit(step, std::move(commit));
  boundary_step_ = step;
  cv_.notify_all();
}

// Under mu_. The cached tensor space of the previous commit goes with it: the server must not keep
// an older commit alive beside the State's (a second copy of the state in memory; an answer being
// sent holds its own reference).
void StateServer::replace_commit(int64_t step, std::shared_ptr<const std::string> commit) {
  commit_ = std::move(commit);
  commit_step_ = step;
  space_of_.reset();
  space_.clear();
}

bool StateServer::has_clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clients_ > 0;
}

void StateServer::drain(std::chrono::milliseconds max) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, max, [&] { return clients_ == 0; });
}

// Joins the handler threads that finished (all of them when stopping).
void StateServer::reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || (*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    if (c->thread.joinable()) c->thread.join();
    ::close(c->fd);
  }
}

void StateServer::accept_loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    ::poll(&p, 1, 100);
    reap(/*all=*/false);
    if (stop_.load()) return;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (conns_.size() >= kMaxConnections) {  // a flood of connections gets no threads
      ::close(fd);
      continue;
    }
    collective::tune_data_socket(fd);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    Conn* raw = c.get();
    conns_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      serve(*raw);
      raw->done.store(true);
    });
  }
}

// One newcomer's connection: the handshake, then requests until it closes or the generation ends.
void StateServer::serve(Conn& c) {
  collective::mesh::Identity id;
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = wire::identity(o_.job, generation_, size_, o_.secret);
    rank = rank_;
  }
  const std::string why =
      wire::accept_handshake(c.fd, id, rank, wire::Clock::now() + o_.io_timeout, &c.close);
  if (!why.empty()) {
    EDL_LOG(2) << "edl: state server " << address_ << ": refused " << collective::peer_address(c.fd) << ": " << why;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++clients_;
  }
  for (;;) {
    std::string request(wire::kRequestBytes, '\0');
    wire::IovCursor cur({iovec{request.data(), request.size()}});
    int err = 0;
    // Between two requests a newcomer waits a batch or more: no deadline, only close / stop.
    if (wire::recv_all(c.fd, cur, wire::Clock::time_point::max(), &c.close, &err) != wire::Io::kOk) break;
    if (!answer(c, request)) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  --clients_;
  cv_.notify_all();
}

// Waits until the worker passed the boundary of `step`; its commit of that step, or null.
std::shared_ptr<const std::string> StateServer::await_commit(Conn& c, int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, o_.io_timeout, [&] { return c.close.load() || boundary_step_ >= step || commit_step_ >= step; });
  return commit_step_ == step ? commit_ : nullptr;
}

// Answers one request; false when the connection must end.
bool StateServer::answer(Conn& c, const std::string& request) {
  wire::Request req;
  try {
    req = wire::decode_request(reinterpret_cast<const uint8_t*>(request.data()));
  } catch (const DataError& e) {
    EDL_LOG(1) << "edl: state server " << address_ << ": " << e.what() << " from " << collective::peer_address(c.fd);
    return false;
  }
  std::shared_ptr<const std::string> commit = await_commit(c, req.step);
  if (c.close.load()) return false;  // the generation ended or the server stops
  wire::Reply reply;
  std::vector<iovec> space;
  if (!commit) {
    reply.status = wire::kNotCommitted;
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (space_of_ == commit) {
        space = space_;
      } else {
        for (const auto& s : snapshot_payloads(*commit, "the commit of step " + std::to_string(req.step)))
          if (s.kind == SnapshotItem::kTensor)
            space.push_back(iovec{const_cast<char*>(commit->data()) + s.offset, s.size});
        if (commit == commit_) {  // cached for the other slices of this commit, never for an older one
          space_of_ = commit;
          space_ = space;
        }
      }
    }
    reply.total = wire::total_bytes(space);
    if (req.offset > reply.total || req.length > reply.total - req.offset) reply.status = wire::kBadRange;
    else reply.length = req.length;
  }
  std::string head = wire::encode(reply);
  std::vector<iovec> out{iovec{head.data(), head.size()}};
  if (reply.status == wire::kOk) {
    std::vector<iovec> body = wire::cut(space, req.offset, req.length);
    out.insert(out.end(), body.begin(), body.end());
  }
  wire::IovCursor cur(std::move(out));
  int err = 0;
  if (wire::send_all(c.fd, cur, wire::Clock::now() + o_.io_timeout, &c.close, &err) != wire::Io::kOk) return false;
  served_.fetch_add(reply.length);
  return true;
}

}  // namespace edl::elastic

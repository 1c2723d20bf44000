// HOST:PORT splitting and errno text (see host_port.h).
#include "common/host_port.h"

#include <cstring>

namespace edl {

std::string split_host_port(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return "missing host or port";
  *host = text.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  if (host->empty()) return "missing host or port";
  if (host->find('/') != std::string::npos) return "host contains '/'";
  const std::string p = text.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return "port is not a number";
  *port = std::stoi(p);
  if (*port < 1 || *port > 65535) return "port out of range 1..65535";
  return "";
}

std::string errno_text(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof(buf));  // the GNU variant: returns the message
}

}  // namespace edl

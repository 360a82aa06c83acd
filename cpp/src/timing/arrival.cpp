#include "kernelsmith/timing/arrival.hpp"

#include <poll.h>
#include <time.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "kernelsmith/error.hpp"

namespace kernelsmith::timing {

double wait_readable(int fd, double timeout_s) {
  KS_REQUIRE(fd >= 0, "wait_readable: a descriptor, got " << fd);
  KS_REQUIRE(timeout_s >= 0 && std::isfinite(timeout_s), "wait_readable: a timeout >= 0, got " << timeout_s);
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN;
  // rounded up: a wait of 0.4 ms must not become a busy poll of 0 ms
  const double ms = std::ceil(timeout_s * 1e3);
  const int wait_ms = ms > 2147483647.0 ? 2147483647 : static_cast<int>(ms);
  const int ready = ::poll(&p, 1, wait_ms);
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  if (ready < 0) {
    if (errno == EINTR) return -1.0;
    KS_THROW(Error, "wait_readable: poll failed: " << std::strerror(errno));
  }
  if (ready == 0) return -1.0;
  if (p.revents & POLLNVAL) KS_THROW(Error, "wait_readable: descriptor " << fd << " is not open");
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

}  // namespace kernelsmith::timing

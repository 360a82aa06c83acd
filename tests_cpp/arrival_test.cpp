#include "kernelsmith/timing/arrival.hpp"

#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <thread>

#include "kernelsmith/error.hpp"

namespace {

double monotonic() {
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

TEST(WaitReadable, ReturnsTheTimeTheDataArrivedOnTheMonotonicClock) {
  Pipe p;
  const double before = monotonic();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ASSERT_EQ(::write(p.fds[1], "x", 1), 1);
  });
  const double at = kernelsmith::timing::wait_readable(p.fds[0], 2.0);
  const double after = monotonic();
  writer.join();
  EXPECT_GE(at, before + 0.025);  // not before the write
  EXPECT_LE(at, after);           // read off the clock before returning
}

TEST(WaitReadable, DataAlreadyThereIsReadyAtOnce) {
  Pipe p;
  ASSERT_EQ(::write(p.fds[1], "x", 1), 1);
  const double before = monotonic();
  const double at = kernelsmith::timing::wait_readable(p.fds[0], 5.0);
  EXPECT_GE(at, before);
  EXPECT_LT(at - before, 0.5);
}

TEST(WaitReadable, TimesOutWithMinusOneAndAHangUpIsReady) {
  Pipe p;
  const double before = monotonic();
  EXPECT_EQ(kernelsmith::timing::wait_readable(p.fds[0], 0.05), -1.0);
  EXPECT_GE(monotonic() - before, 0.045);
  ::close(p.fds[1]);
  p.fds[1] = -1;
  EXPECT_GT(kernelsmith::timing::wait_readable(p.fds[0], 1.0), 0.0);  // the writer is gone: a read returns 0
}

TEST(WaitReadable, RefusesBadArguments) {
  Pipe p;
  EXPECT_THROW(kernelsmith::timing::wait_readable(-1, 1.0), kernelsmith::InvalidArgument);
  EXPECT_THROW(kernelsmith::timing::wait_readable(p.fds[0], -1.0), kernelsmith::InvalidArgument);
  const int closed = p.fds[1];
  ::close(closed);
  p.fds[1] = -1;
  // a descriptor that is not open: poll() reports POLLNVAL
  ::close(p.fds[0]);
  const int gone = p.fds[0];
  p.fds[0] = -1;
  EXPECT_THROW(kernelsmith::timing::wait_readable(gone, 0.1), kernelsmith::Error);
}

}  // namespace

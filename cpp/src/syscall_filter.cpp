// The worker's seccomp-BPF filter (see syscall_filter.hpp). The BPF program
// is assembled here by hand from <linux/filter.h>; no libseccomp.
#include "kernelsmith/syscall_filter.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "kernelsmith/error.hpp"

#if defined(__linux__) && defined(__x86_64__)
#define KS_SYSCALL_FILTER 1
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kernelsmith::syscall_filter {

#ifdef KS_SYSCALL_FILTER

namespace {

constexpr int kMaxFds = 8;
constexpr std::uint32_t kX32Bit = 0x40000000u;

struct Shared {
  std::atomic<std::uint64_t> count;
  std::atomic<int> taken;
  char reason[256];
};

// Set once by install(), before the filter exists; read by the supervisor.
Shared* g_shared = nullptr;
int g_fds[kMaxFds];
int g_nfds = 0;
long g_pid = 0;
int g_listener = -1;
int g_report = 2;
bool g_installed = false;

// ---------------------------------------------------------------- assembler

// A few BPF instructions with symbolic jump targets, resolved at the end.
class Assembler {
 public:
  int label() {
    labels_.push_back(-1);
    return static_cast<int>(labels_.size()) - 1;
  }
  void bind(int l) { labels_[static_cast<std::size_t>(l)] = static_cast<int>(code_.size()); }
  void load(std::uint32_t offset) {
    code_.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offset));
    fix_.push_back({kNext, kNext});
  }
  void ret(std::uint32_t value) {
    code_.push_back(BPF_STMT(BPF_RET | BPF_K, value));
    fix_.push_back({kNext, kNext});
  }
  // if (A <op> k) goto yes else goto no; kNext: the next instruction
  void jump(std::uint16_t op, std::uint32_t k, int yes, int no) {
    code_.push_back(BPF_JUMP(BPF_JMP | op | BPF_K, k, 0, 0));
    fix_.push_back({yes, no});
  }
  std::vector<sock_filter> finish() const {
    std::vector<sock_filter> out = code_;
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i].jt = offset(i, fix_[i].first);
      out[i].jf = offset(i, fix_[i].second);
    }
    return out;
  }
  static constexpr int kNext = -1;

 private:
  std::uint8_t offset(std::size_t at, int label) const {
    if (label == kNext) return 0;
    int target = labels_[static_cast<std::size_t>(label)];
    int distance = target - static_cast<int>(at) - 1;
    if (target < 0 || distance < 0 || distance > 255)
      KS_THROW(Error, "syscall filter: jump from " << at << " to label " << label << " out of range");
    return static_cast<std::uint8_t>(distance);
  }
  std::vector<sock_filter> code_;
  std::vector<std::pair<int, int>> fix_;
  std::vector<int> labels_;
};

constexpr std::uint32_t arg_low(int i) {
  return static_cast<std::uint32_t>(offsetof(seccomp_data, args) + 8 * i);
}
constexpr std::uint32_t arg_high(int i) { return arg_low(i) + 4; }

std::vector<sock_filter> build_program(const std::vector<int>& fds) {
  constexpr int N = Assembler::kNext;
  Assembler a;
  // notify: the supervisor thread decides (judge() below)
  int allow = a.label(), notify = a.label(), kill = a.label(), enosys = a.label();
  int on_close = a.label(), on_range = a.label(), on_dup = a.label();

  a.load(offsetof(seccomp_data, arch));
  a.jump(BPF_JEQ, AUDIT_ARCH_X86_64, N, kill);  // int 0x80 (i386 numbers): never ours
  a.load(offsetof(seccomp_data, nr));
  a.jump(BPF_JGE, kX32Bit, kill, N);  // the x32 ABI's numbers
  a.jump(BPF_JEQ, __NR_close, on_close, N);
  a.jump(BPF_JEQ, __NR_close_range, on_range, N);
  a.jump(BPF_JEQ, __NR_dup2, on_dup, N);
  a.jump(BPF_JEQ, __NR_dup3, on_dup, N);
  a.jump(BPF_JEQ, __NR_ptrace, notify, N);
  a.jump(BPF_JEQ, __NR_process_vm_readv, notify, N);
  a.jump(BPF_JEQ, __NR_process_vm_writev, notify, N);
  a.jump(BPF_JEQ, __NR_pidfd_getfd, notify, N);
  a.jump(BPF_JEQ, __NR_io_uring_setup, enosys, N);
  a.ret(SECCOMP_RET_ALLOW);

  // close(fd): fd is unsigned int, the low word
  a.bind(on_close);
  a.load(arg_low(0));
  for (int fd : fds) a.jump(BPF_JEQ, static_cast<std::uint32_t>(fd), notify, N);
  a.ret(SECCOMP_RET_ALLOW);

  // dup2/dup3(old, new, ...): the target is the second argument
  a.bind(on_dup);
  a.load(arg_low(1));
  for (int fd : fds) a.jump(BPF_JEQ, static_cast<std::uint32_t>(fd), notify, N);
  a.ret(SECCOMP_RET_ALLOW);

  // close_range(first, last, flags) covers fd when first <= fd <= last
  a.bind(on_range);
  for (int fd : fds) {
    int next = a.label();
    a.load(arg_low(0));
    a.jump(BPF_JGT, static_cast<std::uint32_t>(fd), next, N);
    a.load(arg_low(1));
    a.jump(BPF_JGE, static_cast<std::uint32_t>(fd), notify, next);
    a.bind(next);
  }
  a.ret(SECCOMP_RET_ALLOW);

  a.bind(allow);
  a.ret(SECCOMP_RET_ALLOW);
  a.bind(notify);
  a.ret(SECCOMP_RET_USER_NOTIF);
  a.bind(kill);
  a.ret(SECCOMP_RET_KILL_PROCESS);
  a.bind(enosys);
  a.ret(SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA));
  return a.finish();
}

// ------------------------------------------- the supervisor (no allocation)

class Line {
 public:
  Line& add(const char* s) {
    while (*s && len_ + 1 < sizeof(buf_)) buf_[len_++] = *s++;
    buf_[len_] = '\0';
    return *this;
  }
  Line& num(unsigned long long v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v && n < 24);
    while (n && len_ + 1 < sizeof(buf_)) buf_[len_++] = digits[--n];
    buf_[len_] = '\0';
    return *this;
  }
  const char* text() const { return buf_; }
  std::size_t size() const { return len_; }

 private:
  char buf_[240] = {0};
  std::size_t len_ = 0;
};

void write_all(int fd, const char* data, std::size_t n) {
  while (n) {
    long w = syscall(__NR_write, fd, data, n);
    if (w <= 0) return;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_line(const char* text) {
  Line line;
  line.add("\n").add(kLogPrefix).add(text).add("\n");
  write_all(g_report, line.text(), line.size());
}

void record(const char* text) {
  if (g_shared == nullptr) return;
  int expected = 0;
  if (g_shared->taken.compare_exchange_strong(expected, 1)) {
    std::size_t i = 0;
    for (; text[i] && i + 1 < sizeof(g_shared->reason); ++i) g_shared->reason[i] = text[i];
    g_shared->reason[i] = '\0';
  }
  g_shared->count.fetch_add(1);
}

// The end of the worker: SIGKILL, which no program can catch, block or
// ignore; the line on fd 2 says why (the parent reads it).
[[noreturn]] void die(const char* text) {
  write_line(text);
  syscall(__NR_kill, g_pid, SIGKILL);
  for (;;) pause();
}

// first protected descriptor in [first, last]
int covered(unsigned first, unsigned last) {
  for (int i = 0; i < g_nfds; ++i) {
    auto fd = static_cast<unsigned>(g_fds[i]);
    if (first <= fd && fd <= last) return g_fds[i];
  }
  return -1;
}

// The answer to one notification. A descendant's close/dup onto a protected
// number changes only its own table (a forked child before its exec, or a
// program it exec'd, whose numbers are its own): let through. Everything
// else the filter sends here is an attempt: recorded, refused, and in the
// worker itself fatal.
void judge(const seccomp_notif& req, seccomp_notif_resp& resp) {
  resp.id = req.id;
  resp.val = 0;
  resp.error = 0;
  resp.flags = 0;
  // is the caller one of the worker's threads?
  const bool worker = syscall(__NR_tgkill, g_pid, static_cast<long>(req.pid), 0) == 0;
  const int nr = req.data.nr;
  const auto* arg = req.data.args;
  Line text;
  switch (nr) {
    case __NR_close:
    case __NR_close_range:
    case __NR_dup2:
    case __NR_dup3:
      if (!worker) {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
      }
      if (nr == __NR_close) {
        text.add("the program tried to close the evaluator's channel (close of fd ")
            .num(static_cast<unsigned>(arg[0]));
      } else if (nr == __NR_close_range) {
        auto first = static_cast<unsigned>(arg[0]), last = static_cast<unsigned>(arg[1]);
        text.add("the program tried to close the evaluator's channel (close_range over fds ")
            .num(first)
            .add("..")
            .num(last)
            .add(", which holds fd ")
            .num(static_cast<unsigned>(covered(first, last)));
      } else {
        text.add("the program tried to replace the evaluator's channel (")
            .add(nr == __NR_dup2 ? "dup2" : "dup3")
            .add(" onto fd ")
            .num(static_cast<unsigned>(arg[1]));
      }
      text.add(")");
      break;
    case __NR_ptrace:
      text.add("the program tried to trace a process (ptrace request ")
          .num(static_cast<unsigned>(arg[0]))
          .add(")");
      break;
    case __NR_process_vm_readv:
      text.add("the program tried to read another process's memory (process_vm_readv)");
      break;
    case __NR_process_vm_writev:
      text.add("the program tried to write another process's memory (process_vm_writev)");
      break;
    case __NR_pidfd_getfd:
      text.add("the program tried to take a descriptor of another process (pidfd_getfd)");
      break;
    default:
      text.add("the program made a refused system call (number ").num(static_cast<unsigned>(nr)).add(")");
  }
  if (!worker) text.add(" in a process it started");
  record(text.text());
  if (worker) die(text.text());
  resp.error = -EPERM;
}

void supervise(int listener) {
  for (;;) {
    seccomp_notif req;
    std::memset(&req, 0, sizeof(req));
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
      if (errno == EINTR || errno == ENOENT) continue;
      // the listener is gone (the program closed it, or put another file on
      // its number): the filtered calls now fail with ENOSYS, and the
      // harness reads this record before its next message
      record("the program closed the evaluator's system-call supervisor (its listener descriptor)");
      return;
    }
    seccomp_notif_resp resp;
    std::memset(&resp, 0, sizeof(resp));
    judge(req, resp);
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);  // ENOENT: the caller is gone
  }
}

}  // namespace

bool supported() {
  std::uint32_t action = SECCOMP_RET_USER_NOTIF;
  return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 &&
         syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}

void install(const std::vector<int>& fds, int report_fd) {
  if (g_installed) KS_THROW(Error, "the syscall filter is already installed in this process");
  KS_REQUIRE(!fds.empty() && fds.size() <= static_cast<std::size_t>(kMaxFds),
             "protect between 1 and " << kMaxFds << " descriptors, got " << fds.size());
  for (int fd : fds) KS_REQUIRE(fd >= 0, "a protected descriptor must be >= 0, got " << fd);
  KS_REQUIRE(report_fd >= 0, "the report descriptor must be >= 0, got " << report_fd);
  if (!supported()) KS_THROW(Error, "this kernel has no seccomp user notifications");
  if (g_shared == nullptr) {
    void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) KS_THROW(Error, "syscall filter: mmap failed, errno " << errno);
    g_shared = new (page) Shared();
  }
  std::vector<int> sorted(fds);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  g_nfds = static_cast<int>(sorted.size());
  std::copy(sorted.begin(), sorted.end(), g_fds);
  g_pid = syscall(__NR_getpid);
  g_report = report_fd;

  std::vector<sock_filter> code = build_program(sorted);
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(code.size());
  prog.filter = code.data();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    KS_THROW(Error, "syscall filter: PR_SET_NO_NEW_PRIVS failed, errno " << errno);
  // every thread of the process takes the filter; the listener (close-on-exec)
  // is this process's only
  long listener =
      syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER,
              SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_TSYNC_ESRCH | SECCOMP_FILTER_FLAG_NEW_LISTENER,
              &prog);
  if (listener < 0) KS_THROW(Error, "syscall filter: seccomp failed, errno " << errno);
  g_listener = static_cast<int>(listener);
  // Started after the filter: its own calls (ioctl, write, kill, tgkill) are
  // none of the filtered ones, so it never waits on itself.
  std::thread(supervise, g_listener).detach();
  g_installed = true;
}

bool installed() { return g_installed; }

int listener_fd() { return g_listener; }

std::vector<int> protected_fds() {
  return g_installed ? std::vector<int>(g_fds, g_fds + g_nfds) : std::vector<int>{};
}

std::uint64_t attempts() { return g_shared ? g_shared->count.load() : 0; }

std::string reason() {
  if (g_shared == nullptr || g_shared->taken.load() == 0) return {};
  std::size_t n = 0;
  while (n < sizeof(g_shared->reason) && g_shared->reason[n]) ++n;
  return std::string(g_shared->reason, n);
}

void fail(const std::string& why) {
  write_line(why.c_str());
  syscall(__NR_kill, syscall(__NR_getpid), SIGKILL);
  for (;;) pause();
}

#else  // not Linux x86_64: nothing to install

bool supported() { return false; }
void install(const std::vector<int>&, int) { KS_THROW(Error, "the syscall filter needs Linux on x86_64"); }
bool installed() { return false; }
int listener_fd() { return -1; }
std::vector<int> protected_fds() { return {}; }
std::uint64_t attempts() { return 0; }
std::string reason() { return {}; }
void fail(const std::string&) {
  std::raise(SIGKILL);
  std::abort();
}

#endif

}  // namespace kernelsmith::syscall_filter

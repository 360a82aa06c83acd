// The worker's seccomp filter, each case in a forked process of its own (the
// filter cannot be taken off again): what is refused ends the process
// (SIGKILL) with a line that names it; what a forked child or an exec'd
// program (subprocess) does with its own descriptors keeps working.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <thread>

#include "kernelsmith/error.hpp"
#include "kernelsmith/syscall_filter.hpp"

namespace sf = kernelsmith::syscall_filter;

namespace {

struct Outcome {
  int status = 0;
  std::string err;  // what the process wrote on fd 2
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// Runs `body` in a forked process with fd 2 on a pipe; its return value is
// the exit status.
Outcome in_child(const std::function<int()>& body) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    _exit(body());
  }
  close(pipe_fds[1]);
  Outcome out;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) out.err.append(buf, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  waitpid(pid, &out.status, 0);
  return out;
}

// A socket pair, both ends close-on-exec as Python makes them; returns the
// end to protect.
int channel(int* other = nullptr) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  if (other) *other = sv[1];
  return sv[0];
}

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

}  // namespace

TEST(SyscallFilter, SupportedHere) { EXPECT_TRUE(sf::supported()); }

TEST(SyscallFilter, DupOntoTheChannelEndsTheProcessAndSaysSo) {
  int fd = -1;
  Outcome o = in_child([&] {
    int other;
    fd = channel(&other);
    sf::install({fd});
    dup2(other, fd);  // the relay's move
    return 0;
  });
  ASSERT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find(std::string(sf::kLogPrefix) +
                       "the program tried to replace the evaluator's channel (dup2 onto fd "),
            std::string::npos)
      << o.err;
}

TEST(SyscallFilter, TheLineGoesToTheReportDescriptorWhereverFd2Went) {
  Outcome o = in_child([] {
    int other, fd = channel(&other);
    int report = dup(2);
    sf::install({fd, report}, report);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);  // the program silences stderr first
    dup2(other, fd);
    return 0;
  });
  ASSERT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("replace the evaluator's channel (dup2 onto fd"), std::string::npos) << o.err;
}

TEST(SyscallFilter, Dup3AndCloseOfTheChannelAreRefused) {
  Outcome d3 = in_child([] {
    int other, fd = channel(&other);
    sf::install({fd});
    syscall(SYS_dup3, other, fd, 0);
    return 0;
  });
  EXPECT_TRUE(d3.killed_by(SIGKILL)) << d3.err;
  EXPECT_NE(d3.err.find("(dup3 onto fd"), std::string::npos) << d3.err;
  Outcome c = in_child([] {
    int fd = channel();
    sf::install({fd});
    close(fd);  // then a socket of its own would take the number
    return 0;
  });
  EXPECT_TRUE(c.killed_by(SIGKILL)) << c.err;
  EXPECT_NE(c.err.find("close the evaluator's channel (close of fd"), std::string::npos) << c.err;
  Outcome r = in_child([] {
    int fd = channel();
    sf::install({fd});
    syscall(SYS_close_range, 3u, ~0u, 0u);
    return 0;
  });
  EXPECT_TRUE(r.killed_by(SIGKILL)) << r.err;
  EXPECT_NE(r.err.find("close_range over fds 3..4294967295, which holds fd"), std::string::npos) << r.err;
}

TEST(SyscallFilter, OtherDescriptorsStayFree) {
  Outcome o = in_child([] {
    int other, fd = channel(&other);
    sf::install({fd});
    int spare = dup(other);
    if (dup2(other, spare) != spare) return 2;  // onto an unprotected number
    if (close(spare) != 0) return 3;
    if (syscall(SYS_close_range, static_cast<unsigned>(fd + 1), static_cast<unsigned>(fd + 1), 0u) != 0)
      return 4;
    if (!is_open(fd)) return 5;
    return sf::attempts() == 0 ? 0 : 6;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, AForkedChildAndWhatItExecsUseTheNumbersFreely) {
  // subprocess's close_fds in the child between fork and exec, then a
  // program whose loader opens and closes its libraries on the same numbers
  Outcome o = in_child([] {
    int fd = channel();
    sf::install({fd});
    int plain = open("/dev/null", O_RDONLY);  // inheritable, above the channel
    pid_t pid = fork();
    if (pid == 0) {
      if (dup2(0, fd) != fd) _exit(10);  // its own table
      if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) _exit(11);
      if (is_open(plain) || is_open(fd)) _exit(12);
      execl("/bin/sh", "sh", "-c", "exec 3</dev/null 4</dev/null; exec 3<&- 4<&-; /bin/true",
            static_cast<char*>(nullptr));
      _exit(13);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status)) return 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 99);
    if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
    if (!is_open(fd) || !is_open(plain)) return 21;
    return sf::attempts() == 0 ? 0 : 22;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, AThreadIsFilteredToo) {
  Outcome o = in_child([] {
    int other, fd = channel(&other);
    std::thread before([] {});  // a thread that exists at install time
    sf::install({fd});
    std::thread after([&] { dup2(other, fd); });
    after.join();
    before.join();
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
}

TEST(SyscallFilter, AChildsProcessVmReadIsRecordedForTheParent) {
  Outcome o = in_child([] {
    int fd = channel();
    sf::install({fd});
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      char buf[8];
      iovec local{buf, sizeof(buf)}, remote{&buf, sizeof(buf)};
      long got = syscall(SYS_process_vm_readv, parent, &local, 1, &remote, 1, 0);
      _exit(got == -1 && errno == EPERM ? 0 : 1);  // refused, not killed
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 30;
    if (sf::attempts() != 1) return 31;
    return sf::reason().find("read another process's memory (process_vm_readv) in a process it started") !=
                   std::string::npos
               ? 0
               : 32;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, PtraceIsRefused) {
  Outcome p = in_child([] {
    sf::install({channel()});
    syscall(SYS_ptrace, 0L /* PTRACE_TRACEME */, 0L, 0L, 0L);
    return 0;
  });
  EXPECT_TRUE(p.killed_by(SIGKILL)) << p.err;
  EXPECT_NE(p.err.find("trace a process (ptrace request 0)"), std::string::npos) << p.err;
}

TEST(SyscallFilter, FailEndsTheProcessWithTheReason) {
  Outcome o = in_child([]() -> int {
    sf::install({channel()});
    sf::fail("the evaluator's channel is no longer the socket it was");
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.err;
  EXPECT_NE(o.err.find(std::string(sf::kLogPrefix) +
                       "the evaluator's channel is no longer the socket it was"),
            std::string::npos)
      << o.err;
}

TEST(SyscallFilter, InstallTwiceOrBadDescriptorsThrows) {
  Outcome o = in_child([] {
    try {
      sf::install({});
      return 1;
    } catch (const kernelsmith::InvalidArgument&) {
    }
    sf::install({channel()});
    try {
      sf::install({channel()});
      return 2;
    } catch (const kernelsmith::Error&) {
    }
    return sf::installed() && sf::protected_fds().size() == 1 && sf::listener_fd() > 2 ? 0 : 3;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

namespace {

// The start of the page that holds libc's getpid (code the test itself does
// not run while the page is changed).
void* libc_code_page() {
  auto addr = reinterpret_cast<std::uintptr_t>(&getpid);
  return reinterpret_cast<void*>(addr & ~static_cast<std::uintptr_t>(4095));
}

}  // namespace

TEST(SyscallFilter, MakingALibrarysCodeWritableIsRefused) {
  Outcome o = in_child([] {
    sf::install({channel()});
    mprotect(libc_code_page(), 4096, PROT_READ | PROT_WRITE | PROT_EXEC);  // the inline hook's first step
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to make executable code writable (mprotect of libc.so"),
            std::string::npos)
      << o.err;
  // read-write without execute passes the filter (no supervisor round trip
  // for the many read-write changes of honest code), but the page cannot run
  // until execute comes back, and that is refused
  Outcome w = in_child([] {
    int file = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, file, 0);
    if (code == MAP_FAILED) return 2;
    sf::install({channel()});
    if (mprotect(code, 4096, PROT_READ | PROT_WRITE) != 0) return 3;
    static_cast<volatile unsigned char*>(code)[0] = 0xc3;  // the patch
    mprotect(code, 4096, PROT_READ | PROT_EXEC);
    return 0;
  });
  EXPECT_TRUE(w.killed_by(SIGKILL)) << w.status << " " << w.err;
  EXPECT_NE(w.err.find("the program tried to make a file's non-executable mapping executable (mprotect of "),
            std::string::npos)
      << w.err;
  Outcome k = in_child([] {
    sf::install({channel()});
    syscall(SYS_pkey_mprotect, libc_code_page(), 4096, PROT_READ | PROT_WRITE | PROT_EXEC, -1);
    return 0;
  });
  EXPECT_TRUE(k.killed_by(SIGKILL)) << k.err;
  EXPECT_NE(k.err.find("make executable code writable (pkey_mprotect of libc.so"), std::string::npos)
      << k.err;
}

TEST(SyscallFilter, MakingAFilesDataExecutableIsRefused) {
  // the other half of taking a code page's execute away, writing it, and
  // giving it back: execute added to a file mapping that has none
  Outcome o = in_child([] {
    int file = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, file, 0);
    if (page == MAP_FAILED) return 2;
    sf::install({channel()});
    mprotect(page, 4096, PROT_READ | PROT_EXEC);
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to make a file's non-executable mapping executable (mprotect of "),
            std::string::npos)
      << o.err;
}

TEST(SyscallFilter, AnonymousCodeAndPlainMemoryStayFree) {
  // libffi's closures (ctypes callbacks) mmap read-write-execute memory,
  // oneDNN's JIT (PyTorch's CPU convolutions) mprotects it so, malloc's
  // arenas grow with read-write mprotect, ld.so maps code from files
  Outcome o = in_child([] {
    sf::install({channel()});
    void* rwx = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (rwx == MAP_FAILED) return 2;
    void* jit = mmap(nullptr, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mprotect(jit, 1 << 16, PROT_READ | PROT_WRITE) != 0) return 3;
    if (mprotect(jit, 1 << 16, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return 4;
    if (mprotect(jit, 1 << 16, PROT_READ | PROT_EXEC) != 0) return 5;
    if (mprotect(jit, 1 << 16, PROT_READ | PROT_WRITE) != 0) return 6;
    int file = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, file, 0);
    if (code == MAP_FAILED) return 7;
    if (mprotect(code, 4096, PROT_READ) != 0 || mprotect(libc_code_page(), 4096, PROT_READ | PROT_EXEC) != 0)
      return 8;
    for (int i = 0; i < 64; ++i) free(malloc(static_cast<std::size_t>(1) << 20));
    return sf::attempts() == 0 ? 0 : 9;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, OpeningTheProcesssMemoryForWritingIsRefused) {
  Outcome o = in_child([] {
    sf::install({channel()});
    open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to open a process's memory for writing (/proc/"), std::string::npos)
      << o.err;
  // relative to a directory, through the task's own file
  Outcome r = in_child([] {
    sf::install({channel()});
    int dir = open("/proc/thread-self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    openat(dir, "mem", O_WRONLY | O_CLOEXEC);
    return 0;
  });
  EXPECT_TRUE(r.killed_by(SIGKILL)) << r.status << " " << r.err;
  EXPECT_NE(r.err.find("open a process's memory for writing (/proc/"), std::string::npos) << r.err;
}

TEST(SyscallFilter, OtherFilesOpenForWritingAndMemoryForReading) {
  Outcome o = in_child([] {
    sf::install({channel()});
    char name[] = "/tmp/ks_filter_XXXXXX";
    int tmp = mkstemp(name);
    if (tmp < 0) return 2;
    close(tmp);
    int w = open(name, O_WRONLY | O_TRUNC | O_CLOEXEC);
    unlink(name);
    if (w < 0 || write(w, "x", 1) != 1) return 3;
    close(w);
    int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (mem < 0) return 4;
    close(mem);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return 5;
    close(null);
    return sf::attempts() == 0 ? 0 : 6;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, AChildOpeningTheParentsMemoryIsRefusedAndRecorded) {
  Outcome o = in_child([] {
    sf::install({channel()});
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      std::string path = "/proc/" + std::to_string(parent) + "/mem";
      int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      _exit(fd == -1 && errno == EPERM ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 30;
    if (sf::attempts() != 1) return 31;
    return sf::reason().find("open a process's memory for writing (/proc/") != std::string::npos &&
                   sf::reason().find("in a process it started") != std::string::npos
               ? 0
               : 32;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, TheRawClockIsTheMonotonicClock) {
  // the system call itself, no libc on the way: the same clock as
  // clock_gettime(CLOCK_MONOTONIC), read between two readings of it
  timespec a{}, b{};
  clock_gettime(CLOCK_MONOTONIC, &a);
  std::int64_t raw = sf::raw_monotonic_ns();
  clock_gettime(CLOCK_MONOTONIC, &b);
  const std::int64_t lo = a.tv_sec * 1000000000LL + a.tv_nsec, hi = b.tv_sec * 1000000000LL + b.tv_nsec;
  EXPECT_LE(lo, raw);
  EXPECT_LE(raw, hi);
  EXPECT_LE(raw, sf::raw_monotonic_ns());
}

// ------------------------------------------------- a filter of its own

namespace {

// A one-instruction filter that allows everything (what a program's own
// filter would start from).
long own_filter(bool with_prctl) {
  sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  sock_fprog prog{1, &allow};
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (with_prctl) return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

}  // namespace

TEST(SyscallFilter, AFilterOfTheProgramsOwnIsRefused) {
  // pygpubench's seccomp_trap: a filter that traps the harness's writes
  Outcome p = in_child([] {
    sf::install({channel()});
    own_filter(true);
    return 0;
  });
  EXPECT_TRUE(p.killed_by(SIGKILL)) << p.status << " " << p.err;
  EXPECT_NE(p.err.find(std::string(sf::kLogPrefix) +
                       "the program tried to install a system-call filter of its own (prctl PR_SET_SECCOMP)"),
            std::string::npos)
      << p.err;
  Outcome s = in_child([] {
    sf::install({channel()});
    own_filter(false);
    return 0;
  });
  EXPECT_TRUE(s.killed_by(SIGKILL)) << s.err;
  EXPECT_NE(s.err.find("a system-call filter of its own (seccomp SECCOMP_SET_MODE_FILTER)"),
            std::string::npos)
      << s.err;
  Outcome strict = in_child([] {
    sf::install({channel()});
    syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, nullptr);
    return 0;
  });
  EXPECT_TRUE(strict.killed_by(SIGKILL)) << strict.err;
  EXPECT_NE(strict.err.find("a system-call filter of its own (seccomp SECCOMP_SET_MODE_STRICT)"),
            std::string::npos)
      << strict.err;
}

TEST(SyscallFilter, AskingAboutSeccompAndAChildsOwnFilterPass) {
  // asking which actions exist, PR_GET_SECCOMP and other prctls pass; a
  // process the program started may filter itself (its filter is its own)
  Outcome o = in_child([] {
    sf::install({channel()});
    if (!sf::supported()) return 2;  // SECCOMP_GET_ACTION_AVAIL, PR_GET_SECCOMP
    if (prctl(PR_SET_NAME, "ks-test", 0, 0, 0) != 0) return 3;
    pid_t pid = fork();
    if (pid == 0) _exit(own_filter(true) == 0 && own_filter(false) == 0 ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
    return sf::attempts() == 0 ? 0 : 5;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

// ------------------------------------- memory put over a library's code

namespace {

// A page of /bin/sh mapped executable before the filter, so recorded as
// code; the tests below replace it (libc's own pages they cannot unmap and
// still run) or put their memory over libc's page, refused before it lands.
void* recorded_victim() {
  int file = open("/bin/sh", O_RDONLY | O_CLOEXEC);
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, file, 0);
  close(file);
  return page;
}

}  // namespace

TEST(SyscallFilter, AnonymousMemoryMappedOverALibrarysCodeIsRefused) {
  Outcome o = in_child([] {
    sf::install({channel()});
    mmap(libc_code_page(), 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
         -1, 0);
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find(std::string(sf::kLogPrefix) +
                       "the program tried to map memory over the code of libc.so"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("(mmap MAP_FIXED of anonymous memory, executable)"), std::string::npos) << o.err;
  // a memfd (or any other file) mapped executable over it
  Outcome f = in_child([] {
    int memfd = static_cast<int>(syscall(SYS_memfd_create, "patched", 0));
    if (memfd < 0 || ftruncate(memfd, 4096) != 0) return 2;
    sf::install({channel()});
    mmap(libc_code_page(), 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, memfd, 0);
    return 0;
  });
  EXPECT_TRUE(f.killed_by(SIGKILL)) << f.status << " " << f.err;
  EXPECT_NE(f.err.find("map memory over the code of libc.so"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("(mmap MAP_FIXED of /memfd:patched"), std::string::npos) << f.err;
}

TEST(SyscallFilter, MemoryMovedOverALibrarysCodeIsRefused) {
  Outcome o = in_child([] {
    void* patched = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (patched == MAP_FAILED) return 2;
    sf::install({channel()});
    mremap(patched, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, libc_code_page());
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to move memory over the code of libc.so"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("(mremap MREMAP_FIXED)"), std::string::npos) << o.err;
}

TEST(SyscallFilter, SharedMemoryAttachedExecutableOverALibrarysCodeIsRefused) {
  Outcome o = in_child([] {
    int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (id < 0 || shmat(id, nullptr, 0) == reinterpret_cast<void*>(-1)) return 2;
    shmctl(id, IPC_RMID, nullptr);  // gone when the process is
    sf::install({channel()});
    shmat(id, libc_code_page(), SHM_EXEC | SHM_REMAP);
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to map memory over the code of libc.so"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("(shmat SHM_EXEC of shared memory)"), std::string::npos) << o.err;
  // attached where the kernel chooses, executable or not: free
  Outcome f = in_child([] {
    int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (id < 0) return 2;
    sf::install({channel()});
    void* plain = shmat(id, nullptr, 0);
    void* exec = shmat(id, nullptr, SHM_EXEC);
    shmctl(id, IPC_RMID, nullptr);
    if (plain == reinterpret_cast<void*>(-1) || exec == reinterpret_cast<void*>(-1)) return 3;
    return sf::attempts() == 0 ? 0 : 4;
  });
  EXPECT_EQ(f.exit_code(), 0) << f.status << " " << f.err;
}

TEST(SyscallFilter, ExecuteOverRecordedCodeThatIsNoLongerItsFileIsRefused) {
  // unmapped, mapped again read-write (no supervisor), patched, then given
  // execute: refused, whatever memory is there now
  Outcome o = in_child([] {
    void* victim = recorded_victim();
    if (victim == MAP_FAILED) return 2;
    sf::install({channel()});
    if (munmap(victim, 4096) != 0) return 3;
    void* again = mmap(victim, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (again != victim) return 4;
    static_cast<volatile unsigned char*>(again)[0] = 0xc3;
    mprotect(again, 4096, PROT_READ | PROT_EXEC);
    return 0;
  });
  EXPECT_TRUE(o.killed_by(SIGKILL)) << o.status << " " << o.err;
  EXPECT_NE(o.err.find("the program tried to make memory over the code of "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(" executable (mprotect of anonymous memory)"), std::string::npos) << o.err;
  // an executable mapping at the address of the hole it left
  Outcome h = in_child([] {
    void* victim = recorded_victim();
    if (victim == MAP_FAILED) return 2;
    sf::install({channel()});
    if (munmap(victim, 4096) != 0) return 3;
    mmap(victim, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return 0;
  });
  EXPECT_TRUE(h.killed_by(SIGKILL)) << h.status << " " << h.err;
  EXPECT_NE(h.err.find("(mmap at its address of anonymous memory, executable)"), std::string::npos) << h.err;
}

TEST(SyscallFilter, AProcessSharingTheWorkersMemoryIsJudgedAsTheWorker) {
  // clone(CLONE_VM) without CLONE_THREAD: not one of the worker's threads,
  // but its mprotect changes the worker's memory
  Outcome o = in_child([] {
    sf::install({channel()});
    static char stack[1 << 16];
    pid_t pid = clone(
        [](void*) -> int {
          return mprotect(libc_code_page(), 4096, PROT_READ | PROT_WRITE | PROT_EXEC) == -1 && errno == EPERM
                     ? 0
                     : 1;
        },
        stack + sizeof(stack), CLONE_VM | SIGCHLD, nullptr);
    if (pid < 0) return 2;
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
    return sf::reason().find("make executable code writable (mprotect of libc.so") != std::string::npos &&
                   sf::reason().find("in a process it started") != std::string::npos
               ? 0
               : 4;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, HonestMappingsStayFree) {
  // libffi's closures (executable anonymous memory, no address), ld.so's
  // later libraries (a file mapped executable where the kernel chooses),
  // realloc's mremap, a move to an address of its own, a fork's child
  // mapping over its own copy of recorded code, the recorded code given execute again,
  // an executable mapping asked near (at) libc's code, which the kernel puts elsewhere
  Outcome o = in_child([] {
    void* victim = recorded_victim();
    if (victim == MAP_FAILED) return 10;
    sf::install({channel()});
    void* closure =
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (closure == MAP_FAILED) return 2;
    int file = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    void* lib = mmap(nullptr, 8192, PROT_READ | PROT_EXEC, MAP_PRIVATE, file, 0);
    close(file);
    if (lib == MAP_FAILED) return 3;
    if (mmap(lib, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != lib)
      return 4;
    void* block = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    block = mremap(block, 1 << 20, 4 << 20, MREMAP_MAYMOVE);
    if (block == MAP_FAILED) return 5;
    void* there = mmap(nullptr, 8 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mremap(block, 4 << 20, 4 << 20, MREMAP_MAYMOVE | MREMAP_FIXED, there) != there) return 6;
    if (mprotect(libc_code_page(), 4096, PROT_READ | PROT_EXEC) != 0) return 7;
    // an address over code that is all there is only a hint: placed elsewhere
    void* near = mmap(libc_code_page(), 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (near == MAP_FAILED || near == libc_code_page()) return 11;
    pid_t pid = fork();
    if (pid == 0) {
      void* own = mmap(victim, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      _exit(own == victim ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 8;
    return sf::attempts() == 0 ? 0 : 9;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}
namespace {

// Whether `fd` is a process's memory file (/proc/<n>/mem).
bool is_memory_file(int fd) {
  char link[64], target[256];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  std::string t(target, static_cast<std::size_t>(n));
  return t.rfind("/proc/", 0) == 0 && t.size() >= 4 && t.compare(t.size() - 4, 4, "/mem") == 0;
}

// Opens `path` for writing `rounds` times while `flip` changes what it names
// (another thread); every descriptor that is a process's memory file is
// reported on fd 2 as it comes ("won"), before the supervisor may end the
// process. Returns how many opens gave the harmless file.
int open_while_flipping(const char* path, const std::function<void(bool)>& flip, int rounds) {
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    for (bool memory = false; !stop.load(std::memory_order_relaxed); memory = !memory) flip(memory);
  });
  int harmless = 0;
  for (int i = 0; i < rounds; ++i) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (is_memory_file(fd)) {
      const char won[] = "won: a writable descriptor of the process's memory\n";
      (void)!write(2, won, sizeof(won) - 1);
    } else {
      ++harmless;
    }
    close(fd);
  }
  stop.store(true);
  flipper.join();
  return harmless;
}

std::string temp_file() {
  char name[] = "/tmp/ks_race_XXXXXX";
  int fd = mkstemp(name);
  if (fd >= 0) close(fd);
  return name;
}

// The worker either gets the harmless file every time or is ended by the
// supervisor when it sees the memory file; never a writable descriptor of
// its memory.
void expect_never_won(const Outcome& o) {
  EXPECT_EQ(o.err.find("won:"), std::string::npos) << o.err;
  const bool refused = o.killed_by(SIGKILL) &&
                       o.err.find("the program tried to open a process's memory for writing (/proc/") !=
                           std::string::npos;
  EXPECT_TRUE(refused || o.exit_code() == 0) << o.status << " " << o.err;
}

}  // namespace

TEST(SyscallFilter, AFlippedPathNeverOpensTheMemoryForWriting) {
  // the path in the program's memory changes between the supervisor's look
  // and the open (before the supervisor opened the file itself, the
  // kernel's own open came second and could see the other path)
  const std::string harmless = temp_file();
  Outcome o = in_child([&] {
    sf::install({channel()});
    static char path[4096];
    std::snprintf(path, sizeof(path), "%s", harmless.c_str());
    std::string memory = "/proc/self/mem";
    open_while_flipping(
        path,
        [&](bool to_memory) {
          const std::string& s = to_memory ? memory : harmless;
          std::memcpy(path, s.c_str(), s.size() + 1);
        },
        20000);
    return 0;
  });
  unlink(harmless.c_str());
  expect_never_won(o);
}

TEST(SyscallFilter, AFlippedLinkNeverOpensTheMemoryForWriting) {
  const std::string harmless = temp_file();
  const std::string link = harmless + ".link", spare = harmless + ".new";
  Outcome o = in_child([&] {
    sf::install({channel()});
    if (symlink(harmless.c_str(), link.c_str()) != 0) return 2;
    open_while_flipping(
        link.c_str(),
        [&](bool to_memory) {
          unlink(spare.c_str());
          if (symlink(to_memory ? "/proc/self/mem" : harmless.c_str(), spare.c_str()) == 0)
            rename(spare.c_str(), link.c_str());
        },
        20000);
    return 0;
  });
  unlink(link.c_str());
  unlink(spare.c_str());
  unlink(harmless.c_str());
  expect_never_won(o);
}

TEST(SyscallFilter, OpensForWritingKeepTheirMeaning) {
  // the supervisor opens these files for the worker: the caller's cwd and
  // directory descriptor, its umask for a new file's mode, its flags, and
  // the kernel's errno when the open fails
  Outcome o = in_child([] {
    char dir[] = "/tmp/ks_open_XXXXXX";
    if (mkdtemp(dir) == nullptr) return 2;
    sf::install({channel()});
    if (chdir(dir) != 0) return 3;
    umask(027);
    int a = open("made", O_WRONLY | O_CREAT | O_CLOEXEC, 0666);  // relative to the cwd
    struct stat st {};
    if (a < 0 || fstat(a, &st) != 0 || (st.st_mode & 0777) != 0640 || write(a, "abc", 3) != 3) return 4;
    if ((fcntl(a, F_GETFD) & FD_CLOEXEC) == 0) return 5;
    int b = open("made", O_RDWR);  // without O_CLOEXEC
    if (b < 0 || (fcntl(b, F_GETFD) & FD_CLOEXEC) != 0) return 6;
    char back[4] = {0};
    if (read(b, back, 3) != 3 || std::string(back) != "abc") return 7;  // the same file
    if (open("made", O_WRONLY | O_CREAT | O_EXCL, 0600) != -1 || errno != EEXIST) return 8;
    if (open("missing/file", O_WRONLY | O_CREAT, 0600) != -1 || errno != ENOENT) return 9;
    if (open("missing", O_WRONLY) != -1 || errno != ENOENT) return 10;
    umask(0);
    if (syscall(SYS_creat, "created", 0606) < 0 || stat("created", &st) != 0 || (st.st_mode & 0777) != 0606)
      return 11;
    int t = open("made", O_WRONLY | O_TRUNC | O_APPEND);
    if (t < 0 || fstat(t, &st) != 0 || st.st_size != 0 || write(t, "x", 1) != 1) return 12;
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // a directory descriptor
    if (chdir("/") != 0) return 13;
    int e = openat(d, "made", O_RDWR | O_CLOEXEC);
    if (e < 0 || fstat(e, &st) != 0 || st.st_size != 1) return 14;
    if (openat(d, "made", O_WRONLY | O_DIRECTORY) != -1 || errno != ENOTDIR) return 15;
    if (openat(d, ".", O_WRONLY) != -1 || errno != EISDIR) return 16;
    if (symlinkat("made", d, "link") != 0) return 17;
    if (openat(d, "link", O_WRONLY | O_NOFOLLOW) != -1 || errno != ELOOP) return 18;
    int l = openat(d, "link", O_WRONLY | O_CLOEXEC);  // through the link
    if (l < 0 || fstat(l, &st) != 0 || st.st_size != 1) return 19;
    if (openat(12345, "made", O_WRONLY) != -1 || errno != EBADF) return 20;
    if (mkfifoat(d, "fifo", 0600) != 0) return 21;
    if (openat(d, "fifo", O_WRONLY | O_NONBLOCK) != -1 || errno != ENXIO) return 22;  // no reader
    int f = openat(d, "fifo", O_RDWR | O_CLOEXEC);
    if (f < 0) return 23;
    int g = openat(d, "fifo", O_WRONLY | O_CLOEXEC);  // a reader is there: no waiting
    if (g < 0 || (fcntl(g, F_GETFL) & O_NONBLOCK) != 0) return 24;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || write(null, "x", 1) != 1) return 25;
    if (geteuid() != 0) {  // root opens it all the same
      if (fchmodat(d, "made", 0400, 0) != 0) return 26;
      if (openat(d, "made", O_WRONLY) != -1 || errno != EACCES) return 27;
    }
    for (const char* self : {"/proc/thread-self/fd/", "/proc/self/fd/"}) {  // its own descriptor again
      struct stat again {};
      int r = open((self + std::to_string(e)).c_str(), O_WRONLY | O_CLOEXEC);
      if (r < 0 || fstat(e, &st) != 0 || fstat(r, &again) != 0 || again.st_ino != st.st_ino) return 29;
    }
    int unnamed = openat(d, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if ((unnamed < 0 && errno != EOPNOTSUPP) || (unnamed >= 0 && write(unnamed, "x", 1) != 1)) return 30;
    for (const char* name : {"made", "created", "link", "fifo"}) unlinkat(d, name, 0);
    rmdir(dir);
    return sf::attempts() == 0 ? 0 : 28;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, Openat2IsOpenedForTheCallerWithItsResolveFlags) {
  Outcome o = in_child([] {
    char dir[] = "/tmp/ks_open2_XXXXXX";
    if (mkdtemp(dir) == nullptr) return 2;
    sf::install({channel()});
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    open_how how{};
    how.flags = O_RDWR | O_CREAT | O_CLOEXEC;
    how.mode = 0600;
    int a = static_cast<int>(syscall(SYS_openat2, d, "made", &how, sizeof(how)));
    if (a < 0 || write(a, "x", 1) != 1) return 3;
    how.resolve = RESOLVE_BENEATH;
    if (syscall(SYS_openat2, d, "../escape", &how, sizeof(how)) != -1 || errno != EXDEV) return 4;
    how.resolve = 0;
    how.mode = 0;
    how.flags = O_RDWR | (1ull << 40);  // a flag that does not exist
    if (syscall(SYS_openat2, d, "made", &how, sizeof(how)) != -1 || errno != EINVAL) return 5;
    how.flags = O_RDWR;
    how.mode = 0600;  // a mode without O_CREAT
    if (syscall(SYS_openat2, d, "made", &how, sizeof(how)) != -1 || errno != EINVAL) return 6;
    unsigned char bigger[64] = {0};  // a larger struct, zeros after it
    how.mode = 0;
    std::memcpy(bigger, &how, sizeof(how));
    int b = static_cast<int>(syscall(SYS_openat2, d, "made", bigger, sizeof(bigger)));
    if (b < 0 || (fcntl(b, F_GETFD) & FD_CLOEXEC) != 0) return 7;
    bigger[sizeof(how)] = 1;
    if (syscall(SYS_openat2, d, "made", bigger, sizeof(bigger)) != -1 || errno != E2BIG) return 8;
    how.flags = O_RDONLY;
    how.resolve = RESOLVE_NO_MAGICLINKS;
    if (syscall(SYS_openat2, AT_FDCWD, "/proc/self/exe", &how, sizeof(how)) != -1 || errno != ELOOP) return 9;
    unlinkat(d, "made", 0);
    rmdir(dir);
    return sf::attempts() == 0 ? 0 : 10;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, AFifosWriterStillWaitsForItsReader) {
  // the supervisor never waits: the FIFO's writer is handed its descriptor
  // once a reader is there
  Outcome o = in_child([] {
    char dir[] = "/tmp/ks_fifo_XXXXXX";
    if (mkdtemp(dir) == nullptr) return 2;
    const std::string fifo = std::string(dir) + "/fifo";
    if (mkfifo(fifo.c_str(), 0600) != 0) return 3;
    sf::install({channel()});
    std::atomic<int> opened{-2};
    std::thread writer([&] {
      int fd = open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
      opened.store(fd);
      if (fd >= 0 && write(fd, "hi", 2) == 2) close(fd);
    });
    timespec wait{0, 100 * 1000 * 1000};
    nanosleep(&wait, nullptr);
    if (opened.load() != -2) return 4;               // it did not wait
    int other = open("/tmp", O_RDONLY | O_CLOEXEC);  // other opens go on meanwhile
    int spare = open((std::string(dir) + "/spare").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (other < 0 || spare < 0) return 5;
    int reader = open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
    char got[3] = {0};
    if (reader < 0 || read(reader, got, 2) != 2 || std::string(got) != "hi") return 6;
    writer.join();
    if (opened.load() < 0) return 7;
    unlink(fifo.c_str());
    unlink((std::string(dir) + "/spare").c_str());
    rmdir(dir);
    return sf::attempts() == 0 ? 0 : 8;
  });
  EXPECT_EQ(o.exit_code(), 0) << o.status << " " << o.err;
}

TEST(SyscallFilter, APathFlippedFromAFifoNeverOpensTheMemoryForWriting) {
  // a FIFO's writer waits for a reader: the open is done again once one is
  // there, on the FIFO that was checked, not on the path
  char dir[] = "/tmp/ks_fifo_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Outcome o = in_child([&] {
    sf::install({channel()});
    std::atomic<bool> stop{false};
    std::thread reader([&] {  // opens and closes the reading end over and over
      while (!stop.load()) {
        int fd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        timespec pause{0, 200 * 1000};
        nanosleep(&pause, nullptr);
        if (fd >= 0) close(fd);
      }
    });
    static char path[4096];
    std::snprintf(path, sizeof(path), "%s", fifo.c_str());
    std::string memory = "/proc/self/mem";
    open_while_flipping(
        path,
        [&](bool to_memory) {
          const std::string& s = to_memory ? memory : fifo;
          std::memcpy(path, s.c_str(), s.size() + 1);
        },
        2000);
    stop.store(true);
    reader.join();
    return 0;
  });
  unlink(fifo.c_str());
  rmdir(dir);
  expect_never_won(o);
}

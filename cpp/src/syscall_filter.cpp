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
#include <ctime>
#include <new>
#include <thread>

#include "kernelsmith/error.hpp"

#if defined(__linux__) && defined(__x86_64__)
#define KS_SYSCALL_FILTER 1
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/kcmp.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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

// The code of every file (and the vDSO) mapped executable when the filter was
// installed: libc, libpython, libtorch, ... Libraries loaded before the
// program runs are never unloaded, so nothing honest maps over them later.
// Filled by install() before the filter exists, read by the supervisor.
struct CodeRange {
  unsigned long long start, end, offset, inode;
  unsigned dev_major, dev_minor;
  char name[64];  // the file's name without its directory, "[vdso]"
};
std::vector<CodeRange>* g_code = nullptr;

// the listener handed to the supervisor thread (kPending until the filter is
// there, -1 when it could not be installed)
constexpr int kPending = -2;
std::atomic<int> g_start{kPending};

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
  int on_protect = a.label(), on_openat = a.label(), on_open = a.label();
  int on_map = a.label(), on_remap = a.label(), on_seccomp = a.label(), on_prctl = a.label();
  int on_shmat = a.label();

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
  a.jump(BPF_JEQ, __NR_mprotect, on_protect, N);
  a.jump(BPF_JEQ, __NR_pkey_mprotect, on_protect, N);
  a.jump(BPF_JEQ, __NR_mmap, on_map, N);
  a.jump(BPF_JEQ, __NR_mremap, on_remap, N);
  a.jump(BPF_JEQ, __NR_shmat, on_shmat, N);
  a.jump(BPF_JEQ, __NR_seccomp, on_seccomp, N);
  a.jump(BPF_JEQ, __NR_prctl, on_prctl, N);
  a.jump(BPF_JEQ, __NR_openat, on_openat, N);
  a.jump(BPF_JEQ, __NR_open, on_open, N);
  a.jump(BPF_JEQ, __NR_creat, notify, N);
  a.jump(BPF_JEQ, __NR_openat2, notify, N);  // its flags are in memory: the supervisor reads them
  a.ret(SECCOMP_RET_ALLOW);

  // mprotect/pkey_mprotect(addr, len, prot, ...): only what asks for execute
  // goes to the supervisor. A read-write change passes here: routing those
  // too (each one a look at the process's mappings) cost the H100 pool 0.908x
  // of its throughput against 0.940x without them (session 17). Code made
  // writable without execute cannot run until execute comes back, and that
  // change is refused (a file mapping given execute it lacks), so a patched
  // library page is caught when it is made executable again.
  a.bind(on_protect);
  a.load(arg_low(2));
  a.jump(BPF_JSET, PROT_EXEC, notify, allow);

  // mmap(addr, len, prot, flags, fd, off): only executable ones (libffi's
  // closures, ld.so's libraries: few) go to the supervisor, which refuses one
  // over a library's code; read-only and read-write ones (malloc, the CUDA
  // driver: many) never leave here. Memory mapped over code without execute
  // cannot run until an mprotect asks for execute, and that one is looked at.
  a.bind(on_map);
  a.load(arg_low(2));
  a.jump(BPF_JSET, PROT_EXEC, notify, allow);

  // mremap(old, old_len, new_len, flags, new): only a move to an address the
  // caller names (MREMAP_FIXED); glibc's realloc of large blocks lets the
  // kernel choose
  a.bind(on_remap);
  a.load(arg_low(3));
  a.jump(BPF_JSET, MREMAP_FIXED, notify, allow);

  // shmat(id, addr, flags): System V shared memory attached executable
  // (SHM_EXEC; with SHM_REMAP over what is there)
  a.bind(on_shmat);
  a.load(arg_low(2));
  a.jump(BPF_JSET, SHM_EXEC, notify, allow);

  // seccomp(op, ...), prctl(PR_SET_SECCOMP, ...): a filter of the program's
  // own (it could trap the harness's writes and rewrite them); asking which
  // actions there are (SECCOMP_GET_ACTION_AVAIL, GET_NOTIF_SIZES) passes.
  // Both take the op/option as an int: the low word.
  a.bind(on_seccomp);
  a.load(arg_low(0));
  a.jump(BPF_JEQ, SECCOMP_SET_MODE_STRICT, notify, N);
  a.jump(BPF_JEQ, SECCOMP_SET_MODE_FILTER, notify, allow);
  a.bind(on_prctl);
  a.load(arg_low(0));
  a.jump(BPF_JEQ, PR_SET_SECCOMP, notify, allow);

  // open/openat for writing (O_WRONLY, O_RDWR; 3 is not valid but tried):
  // the supervisor looks at the path (a process's memory file?)
  a.bind(on_openat);
  a.load(arg_low(2));
  a.jump(BPF_JSET, O_WRONLY | O_RDWR, notify, allow);
  a.bind(on_open);
  a.load(arg_low(1));
  a.jump(BPF_JSET, O_WRONLY | O_RDWR, notify, allow);

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

// ------------------------------------- the memory rules (no allocation)

// A path or a name in a fixed buffer.
class Text {
 public:
  Text& add(const char* s, std::size_t n = static_cast<std::size_t>(-1)) {
    for (std::size_t i = 0; i < n && s[i] && len_ + 1 < sizeof(buf_); ++i) buf_[len_++] = s[i];
    buf_[len_] = '\0';
    return *this;
  }
  Text& num(unsigned long long v) {
    Line l;
    l.num(v);
    return add(l.text());
  }
  const char* text() const { return buf_; }
  std::size_t size() const { return len_; }
  bool starts_with(const char* p) const { return std::strncmp(buf_, p, std::strlen(p)) == 0; }
  bool ends_with(const char* p) const {
    std::size_t n = std::strlen(p);
    return len_ >= n && std::strcmp(buf_ + len_ - n, p) == 0;
  }

 private:
  char buf_[4200] = {0};
  std::size_t len_ = 0;
};

Text proc_path(long pid, const char* leaf) {
  Text t;
  t.add("/proc/").num(static_cast<unsigned long long>(pid)).add("/").add(leaf);
  return t;
}

// Reads up to `n` bytes of process `pid`'s memory at `addr` through its
// /proc/<pid>/mem (for the worker's threads their own process, always
// allowed; a bad address gives a short read, never a fault here).
// process_vm_readv is one of the filtered calls: the supervisor would wait
// on itself.
std::size_t read_memory(long pid, unsigned long long addr, void* out, std::size_t n) {
  int fd = open(proc_path(pid, "mem").text(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  long got = pread(fd, out, n, static_cast<off_t>(addr));
  close(fd);
  return got > 0 ? static_cast<std::size_t>(got) : 0;
}

// One mapping of a process, from PROCMAP_QUERY or a line of the maps text.
struct Vma {
  unsigned long long start = 0, end = 0, offset = 0, inode = 0;
  unsigned dev_major = 0, dev_minor = 0;
  bool exec = false;
  const char* name = "";  // the path, "[vdso]", "" for anonymous memory
  std::size_t name_len = 0;
};

bool special_code(const char* name, std::size_t n) {
  return (n >= 6 && std::strncmp(name, "[vdso]", 6) == 0) ||
         (n >= 10 && std::strncmp(name, "[vsyscall]", 10) == 0);
}

// struct procmap_query of <linux/fs.h> (Linux 6.11, PROCMAP_QUERY), written
// out for older headers: one mapping per ioctl on /proc/<pid>/maps, without
// the text of every mapping before it (0.5 ms a call in a process with
// PyTorch loaded, on a loaded machine).
struct ProcmapQuery {
  std::uint64_t size;
  std::uint64_t query_flags;
  std::uint64_t query_addr;
  std::uint64_t vma_start;
  std::uint64_t vma_end;
  std::uint64_t vma_flags;
  std::uint64_t vma_page_size;
  std::uint64_t vma_offset;
  std::uint64_t inode;
  std::uint32_t dev_major;
  std::uint32_t dev_minor;
  std::uint32_t vma_name_size;
  std::uint32_t build_id_size;
  std::uint64_t vma_name_addr;
  std::uint64_t build_id_addr;
};
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr std::uint64_t kVmaExecutable = 0x04, kCoveringOrNext = 0x10;

// The mappings in [lo, hi) through PROCMAP_QUERY, each handed to `visit`
// until it returns true; false when this kernel has no such ioctl (or a
// name did not fit): then the maps text.
template <class Visit>
bool query_mappings(int fd, unsigned long long lo, unsigned long long hi, Visit& visit) {
  unsigned long long at = lo;
  while (at < hi) {
    char name[4200];
    ProcmapQuery q;
    std::memset(&q, 0, sizeof(q));
    q.size = sizeof(q);
    q.query_flags = kCoveringOrNext;
    q.query_addr = at;
    q.vma_name_size = sizeof(name);
    q.vma_name_addr = reinterpret_cast<std::uintptr_t>(name);
    if (ioctl(fd, kProcmapQuery, &q) != 0) return errno == ENOENT;  // ENOENT: none at or after `at`
    if (q.vma_start >= hi) return true;
    std::size_t n = q.vma_name_size ? q.vma_name_size - 1 : 0;  // with its NUL
    if (n >= sizeof(name)) n = sizeof(name) - 1;
    name[n] = '\0';
    Vma v;
    v.start = q.vma_start;
    v.end = q.vma_end;
    v.offset = q.vma_offset;
    v.inode = q.inode;
    v.dev_major = q.dev_major;
    v.dev_minor = q.dev_minor;
    v.exec = (q.vma_flags & kVmaExecutable) != 0;
    v.name = name;
    v.name_len = n;
    if (visit(v) || q.vma_end <= at) return true;
    at = q.vma_end;
  }
  return true;
}

// One line of /proc/<pid>/maps: "start-end perms offset major:minor inode path".
bool parse_maps_line(const char* ln, std::size_t n, Vma& v) {
  std::size_t i = 0;
  auto hex = [&] {
    unsigned long long x = 0;
    for (; i < n; ++i) {
      char c = ln[i];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) break;
      x = x * 16 + static_cast<unsigned>(d);
    }
    return x;
  };
  auto spaces = [&] {
    while (i < n && ln[i] == ' ') ++i;
  };
  v.start = hex();
  if (i >= n || ln[i] != '-') return false;
  ++i;
  v.end = hex();
  spaces();
  if (i + 4 > n) return false;
  v.exec = ln[i + 2] == 'x';
  i += 4;
  spaces();
  v.offset = hex();
  spaces();
  v.dev_major = static_cast<unsigned>(hex());
  if (i < n && ln[i] == ':') ++i;
  v.dev_minor = static_cast<unsigned>(hex());
  spaces();
  v.inode = 0;
  for (; i < n && ln[i] >= '0' && ln[i] <= '9'; ++i)
    v.inode = v.inode * 10 + static_cast<unsigned>(ln[i] - '0');
  spaces();
  v.name = ln + i;
  v.name_len = n - i;
  return true;
}

// The same through the maps text (kernels before 6.11).
template <class Visit>
void text_mappings(int fd, unsigned long long lo, unsigned long long hi, Visit& visit) {
  if (lseek(fd, 0, SEEK_SET) != 0) return;
  char block[8192], line[4200];
  std::size_t ll = 0;
  for (;;) {
    long got = read(fd, block, sizeof(block));
    if (got <= 0) return;
    for (long k = 0; k < got; ++k) {
      char c = block[k];
      if (c != '\n') {
        if (ll + 1 < sizeof(line)) line[ll++] = c;
        continue;
      }
      line[ll] = '\0';
      Vma v;
      const bool parsed = parse_maps_line(line, ll, v);
      ll = 0;
      if (!parsed || v.end <= lo) continue;
      if (v.start >= hi || visit(v)) return;
    }
  }
}

// Hands each mapping of the maps file `fd` that overlaps [lo, hi), in
// address order, to `visit` until it returns true.
template <class Visit>
void each_mapping(int fd, unsigned long long lo, unsigned long long hi, Visit visit) {
  if (!query_mappings(fd, lo, hi, visit)) text_mappings(fd, lo, hi, visit);
}

// The first code range recorded at install that overlaps [lo, hi).
const CodeRange* recorded_code(unsigned long long lo, unsigned long long hi) {
  if (g_code == nullptr) return nullptr;
  for (const CodeRange& r : *g_code)
    if (r.start < hi && lo < r.end) return &r;
  return nullptr;
}

// Whether mapping `v` is, where it overlaps `r`, the file (at the same
// offsets) or the vDSO that was there at install.
bool same_code(const Vma& v, const CodeRange& r) {
  if (r.inode == 0)
    return v.inode == 0 && v.start == r.start && v.name_len >= 6 && std::strncmp(v.name, "[vdso]", 6) == 0;
  return v.inode == r.inode && v.dev_major == r.dev_major && v.dev_minor == r.dev_minor &&
         v.offset - v.start == r.offset - r.start;
}

// At install, before the filter: every file's executable mapping and the vDSO.
void record_code() {
  auto* code = new std::vector<CodeRange>();
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    each_mapping(fd, 0, ~0ull, [code](const Vma& v) {
      const bool vdso = v.name_len >= 6 && std::strncmp(v.name, "[vdso]", 6) == 0;
      if (!v.exec || (v.inode == 0 && !vdso)) return false;
      CodeRange r{v.start, v.end, v.offset, v.inode, v.dev_major, v.dev_minor, {0}};
      std::size_t from = v.name_len;
      while (from > 0 && v.name[from - 1] != '/') --from;
      std::size_t n = std::min(v.name_len - from, sizeof(r.name) - 1);
      std::memcpy(r.name, v.name + from, n);
      r.name[n] = '\0';
      code->push_back(r);
      return false;
    });
    close(fd);
  }
  g_code = code;
}

// What a protection change would do to the code of a file: 0 nothing, 1 make
// an executable file mapping (a library's code, or the vDSO) writable, 2 add
// execute to a file mapping that is not executable (the second half of
// making code writable by taking its execute away first), 3 make memory
// executable over code recorded at install that is no longer that code's
// file there (anonymous or memfd memory, another file, mapped over it).
// Anonymous memory elsewhere is left alone: JITs (oneDNN's Xbyak under
// PyTorch's CPU convolutions mprotects it read-write-execute) and libffi's
// closures (ctypes callbacks, mmap'd read-write-execute) use it.
// The decision for one mapping that the change covers: `code` for a file's
// mapping or the vDSO's.
int mapping_problem(bool exec, bool code, unsigned prot) {
  if (!code) return 0;
  if (exec && (prot & PROT_WRITE)) return 1;
  if (!exec && (prot & PROT_EXEC)) return 2;
  return 0;
}

// The problem of a protection change of [lo, lo + len) in process `pid`:
// `file` gets the path of the mapping at fault ("" for anonymous memory),
// `over` the recorded code for problem 3.
int protect_problem(long pid, unsigned long long lo, unsigned long long len, unsigned prot, Text& file,
                    const CodeRange** over) {
  if (len == 0) return 0;
  const unsigned long long hi = lo + ((len + 4095) & ~4095ull);
  int fd = open(proc_path(pid, "maps").text(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int problem = 0;
  each_mapping(fd, lo, hi, [&](const Vma& v) {
    if ((prot & PROT_EXEC) && g_code != nullptr) {
      const unsigned long long a = std::max(lo, v.start), b = std::min(hi, v.end);
      for (const CodeRange& r : *g_code) {
        if (r.start < b && a < r.end && !same_code(v, r)) {
          problem = 3;
          *over = &r;
          break;
        }
      }
    }
    if (problem == 0)
      problem = mapping_problem(v.exec, v.inode != 0 || special_code(v.name, v.name_len), prot);
    if (problem) file.add(v.name, v.name_len);
    return problem != 0;
  });
  close(fd);
  return problem;
}

// Whether the file that process `pid` opens as `path` (relative to its
// `dirfd`) is a process's memory file (/proc/<n>/mem, /proc/<n>/task/<m>/mem):
// the supervisor opens the same path without access (O_PATH, through the
// caller's cwd or dirfd) and reads what it is. `seen` gets the name.
// A race: the program can change the path, or the link it goes through,
// between this look and the kernel's own open (docs/evaluator.md); the
// worker's own opens go to the opener instead (below), this look stays for
// a descendant's and where the opener cannot be used.
bool names_memory(long pid, int dirfd, const char* path, Text& seen) {
  Text full;
  if (path[0] != '/') {
    if (dirfd == AT_FDCWD) {
      full.add(proc_path(pid, "cwd/").text());
    } else {
      full.add(proc_path(pid, "fd/").text()).num(static_cast<unsigned>(dirfd)).add("/");
    }
  }
  full.add(path);
  int fd = open(full.text(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    // not there (a new file: not a process's memory), or not ours to look
    // at: then by its name
    seen.add(path);
    return errno != ENOENT && (seen.ends_with("/mem") || std::strcmp(path, "mem") == 0);
  }
  Text link;
  link.add("/proc/self/fd/").num(static_cast<unsigned>(fd));
  char target[4096];
  long n = readlink(link.text(), target, sizeof(target) - 1);
  close(fd);
  if (n <= 0) {
    seen.add(path);
    return seen.ends_with("/mem");
  }
  seen.add(target, static_cast<std::size_t>(n));
  return seen.starts_with("/proc/") && seen.ends_with("/mem");
}

// Whether process `pid` uses the worker's memory: one of its threads, or a
// process cloned with CLONE_VM (kcmp; where it cannot say, a process of its
// own, as before).
bool shares_memory(bool worker, long pid) {
  return worker || syscall(__NR_kcmp, g_pid, pid, KCMP_VM, 0, 0) == 0;
}

// An mprotect/pkey_mprotect asking for execute: refused (true, `text` says
// why) when it makes a file's code writable, gives a file's mapping execute
// it lacks, or makes memory executable over code recorded at install that is
// not that code's file there any more.
bool protect_refused(const seccomp_notif& req, Line& text) {
  const auto* arg = req.data.args;
  Text file;
  const CodeRange* over = nullptr;
  const int problem = protect_problem(req.pid, arg[0], arg[1], static_cast<unsigned>(arg[2]), file, &over);
  if (problem == 0) return false;
  const char* call = req.data.nr == __NR_mprotect ? "mprotect" : "pkey_mprotect";
  if (problem == 3) {
    text.add("the program tried to make memory over the code of ")
        .add(over->name)
        .add(" executable (")
        .add(call)
        .add(" of ")
        .add(file.size() ? file.text() : "anonymous memory")
        .add(")");
    return true;
  }
  const char* name = std::strrchr(file.text(), '/');
  text.add(problem == 1 ? "the program tried to make executable code writable ("
                        : "the program tried to make a file's non-executable mapping executable (")
      .add(call)
      .add(" of ")
      .add(name ? name + 1 : file.text())
      .add(")");
  return true;
}

// Whether the code recorded at install in [lo, hi) is all still there in
// process `pid`, mapped by its file (or the vDSO) as it was.
bool code_intact(long pid, unsigned long long lo, unsigned long long hi) {
  int fd = open(proc_path(pid, "maps").text(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool intact = true;
  unsigned long long at = lo;  // looked at up to here
  each_mapping(fd, lo, hi, [&](const Vma& v) {
    if (v.start > at && recorded_code(at, std::min(v.start, hi)) != nullptr) intact = false;  // a hole
    const unsigned long long a = std::max(lo, v.start), b = std::min(hi, v.end);
    for (const CodeRange& r : *g_code)
      if (r.start < b && a < r.end && !same_code(v, r)) intact = false;
    at = std::max(at, v.end);
    return !intact;
  });
  close(fd);
  return intact && (at >= hi || recorded_code(at, hi) == nullptr);
}

// An executable mmap or shmat, or an mremap to an address the caller names: refused
// (true, `text` says why) when its new range overlaps code recorded at
// install. An mmap without an address is placed by the kernel, never over
// a mapping that is there (a hole the program unmapped is another story:
// docs/evaluator.md).
bool map_refused(const seccomp_notif& req, Line& text) {
  const auto* arg = req.data.args;
  const bool remap = req.data.nr == __NR_mremap, shm = req.data.nr == __NR_shmat;
  const unsigned long long lo = remap ? arg[4] : shm ? arg[1] : arg[0];
  unsigned long long len = remap ? arg[2] : arg[1];
  if (shm) {  // the segment's size (shmctl is not filtered); a page where it cannot say
    shmid_ds ds{};
    len = shmctl(static_cast<int>(arg[0]), IPC_STAT, &ds) == 0 ? ds.shm_segsz : 4096;
  }
  if ((lo == 0 && !remap) || len == 0) return false;
  unsigned long long hi = lo + ((len + 4095) & ~4095ull);
  if (hi < lo) hi = ~0ull;
  const CodeRange* over = recorded_code(lo, hi);
  if (over == nullptr) return false;
  // an address the kernel may only take where nothing is mapped (mmap
  // without MAP_FIXED, or with MAP_FIXED_NOREPLACE; shmat without
  // SHM_REMAP): over code that is all still there it lands elsewhere or
  // fails; only a hole the program made is refused
  const unsigned long long flags = arg[shm ? 2 : 3];
  const bool replaces = remap || (shm ? (flags & SHM_REMAP) != 0 : (flags & MAP_FIXED) != 0);
  if (!replaces && code_intact(req.pid, lo, hi)) return false;
  if (remap || shm) {
    text.add(remap ? "the program tried to move memory over the code of "
                   : "the program tried to map memory over the code of ")
        .add(over->name)
        .add(remap ? " (mremap MREMAP_FIXED)" : " (shmat SHM_EXEC of shared memory)");
    return true;
  }
  text.add("the program tried to map memory over the code of ")
      .add(over->name)
      .add((flags & MAP_FIXED_NOREPLACE) ? " (mmap MAP_FIXED_NOREPLACE of "
           : (flags & MAP_FIXED)         ? " (mmap MAP_FIXED of "
                                         : " (mmap at its address of ");
  if (flags & MAP_ANONYMOUS) {
    text.add("anonymous memory");
  } else {
    char target[200];
    long n = readlink(proc_path(req.pid, "fd/").num(static_cast<unsigned>(arg[4])).text(), target,
                      sizeof(target) - 1);
    target[n > 0 ? n : 0] = '\0';
    text.add(n > 0 ? target : "a file");
  }
  text.add(", executable)");
  return true;
}

// ---------------------- opens for writing done for the caller (no allocation)

// The worker's own opens for writing (and every openat2) are not let through
// after a look at the path, which the program could change (the path in its
// memory, or a link on the way) before the kernel's own open: the opener
// thread opens the file itself, checks what it holds, and hands that very
// file to the caller with SECCOMP_IOCTL_NOTIF_ADDFD and
// SECCOMP_ADDFD_FLAG_SEND (Linux 5.14+). The opener has a descriptor table
// of its own (unshare(CLONE_FILES)): the program cannot swap or dup the
// files it holds. Its own opens for writing pass the filter too, so the
// supervisor answers them (CONTINUE; what they give is checked on the
// descriptor): the opener is a second thread because the supervisor cannot
// answer itself. A descendant's open keeps the look at the path and
// CONTINUE (the file it opens must be opened in its own process).

bool g_addfd = false;               // probed once by install()
std::atomic<long> g_opener_tid{0};  // the opener's thread id
// 0 until the opener has its own table (1) or cannot have one (-1)
std::atomic<int> g_opener_ready{0};
// the supervisor's requests for the opener: a ring (one producer, one
// consumer) and a futex word that counts what was put in
constexpr unsigned kJobs = 256;
seccomp_notif g_jobs[kJobs];
std::atomic<unsigned> g_jobs_put{0}, g_jobs_taken{0};
std::atomic<int> g_jobs_word{0};
int g_opener_mem = -1;  // the worker's /proc/<pid>/mem, read-only, in the opener's table

bool opens_file(int nr) {
  return nr == __NR_open || nr == __NR_openat || nr == __NR_creat || nr == __NR_openat2;
}

long futex(std::atomic<int>* word, int op, int value, const timespec* timeout = nullptr) {
  return syscall(__NR_futex, reinterpret_cast<int*>(word), op, value, timeout, nullptr, 0);
}

// SECCOMP_ADDFD_FLAG_SEND is there when an ADDFD for no pending request
// fails for the request (ENOENT, or EINPROGRESS for one not yet received)
// rather than for the flag (EINVAL before 5.14, ENOTTY before 5.9).
bool addfd_send_available(int listener) {
  seccomp_notif_addfd probe{};
  probe.id = 0;
  probe.flags = SECCOMP_ADDFD_FLAG_SEND;
  probe.srcfd = static_cast<std::uint32_t>(listener);
  return ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &probe) != 0 && (errno == ENOENT || errno == EINPROGRESS);
}

// Puts a worker's open on the opener's ring; false when the opener is not
// there (no ADDFD, not started, a descendant's call) or the ring is full.
bool hand_to_opener(const seccomp_notif& req) {
  if (!opens_file(req.data.nr) || g_opener_ready.load() != 1) return false;
  if (syscall(__NR_tgkill, g_pid, static_cast<long>(req.pid), 0) != 0) return false;
  const unsigned put = g_jobs_put.load(std::memory_order_relaxed);
  if (put - g_jobs_taken.load() >= kJobs) return false;
  g_jobs[put % kJobs] = req;
  g_jobs_put.store(put + 1);
  g_jobs_word.fetch_add(1);
  futex(&g_jobs_word, FUTEX_WAKE_PRIVATE, 1);
  return true;
}

// What an open asks for, from its arguments (and openat2's struct).
struct OpenCall {
  int dirfd = AT_FDCWD;
  std::uint64_t flags = 0, mode = 0, resolve = 0;
  bool two = false;  // openat2
  char path[4096];
};

void answer(int listener, const seccomp_notif& req, int error, bool go_on = false) {
  seccomp_notif_resp resp{};
  resp.id = req.id;
  resp.error = go_on ? 0 : -error;
  resp.flags = go_on ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0;
  ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);  // ENOENT: the caller is gone
}

// read_memory through the descriptor the opener keeps (a worker's thread
// has the worker's memory)
std::size_t read_caller(long tid, unsigned long long addr, void* out, std::size_t n) {
  if (g_opener_mem < 0) return read_memory(tid, addr, out, n);
  long got = pread(g_opener_mem, out, n, static_cast<off_t>(addr));
  return got > 0 ? static_cast<std::size_t>(got) : 0;
}

// Reads the call's arguments, path and openat2's struct: 0, or the errno
// the call fails with.
int read_call(const seccomp_notif& req, OpenCall& c) {
  const auto* arg = req.data.args;
  unsigned long long path = arg[0];
  switch (req.data.nr) {
    case __NR_open:
      c.flags = static_cast<std::uint32_t>(arg[1]);
      c.mode = static_cast<std::uint32_t>(arg[2]);
      break;
    case __NR_creat:
      c.flags = O_CREAT | O_WRONLY | O_TRUNC;
      c.mode = static_cast<std::uint32_t>(arg[1]);
      break;
    default:  // openat, openat2
      c.dirfd = static_cast<int>(arg[0]);
      path = arg[1];
      c.flags = static_cast<std::uint32_t>(arg[2]);
      c.mode = static_cast<std::uint32_t>(arg[3]);
  }
  if (req.data.nr == __NR_openat2) {
    // the kernel's own checks of the struct (size, flags, mode, resolve):
    // the same struct with an empty path fails with ENOENT only after them
    unsigned char how[4096];
    const unsigned long long size = arg[3];
    if (size < sizeof(open_how)) return EINVAL;
    if (size > sizeof(how)) return E2BIG;
    if (read_caller(req.pid, arg[2], how, size) != size) return EFAULT;
    if (syscall(__NR_openat2, AT_FDCWD, "", how, size) == 0 || errno != ENOENT) return errno;
    open_how h;
    std::memcpy(&h, how, sizeof(h));
    c.two = true;
    c.flags = h.flags;
    c.mode = h.mode;
    c.resolve = h.resolve;
  }
  const std::size_t got = read_caller(req.pid, path, c.path, sizeof(c.path));
  if (std::memchr(c.path, '\0', got) == nullptr) return got < sizeof(c.path) ? EFAULT : ENAMETOOLONG;
  if (c.path[0] == '\0') return ENOENT;
  // /proc/thread-self is the caller's thread, not the opener's
  constexpr std::size_t kSelf = sizeof("/proc/thread-self") - 1;
  if (std::strncmp(c.path, "/proc/thread-self", kSelf) == 0 &&
      (c.path[kSelf] == '/' || c.path[kSelf] == '\0')) {
    Text t;
    t.add("/proc/")
        .num(static_cast<unsigned long long>(g_pid))
        .add("/task/")
        .num(req.pid)
        .add(c.path + kSelf);
    if (t.size() + 1 > sizeof(c.path)) return ENAMETOOLONG;
    std::memcpy(c.path, t.text(), t.size() + 1);
  }
  return 0;
}

// The directory the path starts from, opened O_PATH in the opener's table
// (the caller's cwd or dirfd, through /proc/<tid>/), or -1 with `error`.
int start_dir(long tid, const OpenCall& c, int& error) {
  const bool rooted = (c.resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT)) != 0;
  error = 0;
  if (c.path[0] == '/' && !rooted) return AT_FDCWD;
  Text dir;
  if (c.dirfd == AT_FDCWD) {
    dir.add(proc_path(tid, "cwd").text());
  } else if (c.dirfd < 0) {
    error = EBADF;
    return -1;
  } else {
    dir.add(proc_path(tid, "fd/").text()).num(static_cast<unsigned>(c.dirfd));
  }
  int fd = open(dir.text(), O_PATH | O_CLOEXEC);
  if (fd < 0) error = errno == ENOENT ? EBADF : errno;
  return fd;
}

int open_from(int dir, const OpenCall& c, std::uint64_t flags, std::uint64_t mode) {
  if (!c.two || c.resolve == 0)
    return static_cast<int>(
        syscall(__NR_openat, dir, c.path, static_cast<int>(flags), static_cast<unsigned>(mode)));
  open_how how{};
  how.flags = flags;
  how.mode = mode;
  how.resolve = c.resolve;
  return static_cast<int>(syscall(__NR_openat2, dir, c.path, &how, sizeof(how)));
}

// Whether the opener's descriptor `fd` is a process's memory file (a
// regular file of procfs named mem); `seen` gets its name.
void name_of(int fd, Text& seen) {
  Text link;
  link.add("/proc/thread-self/fd/").num(static_cast<unsigned>(fd));
  char target[4096];
  long n = readlink(link.text(), target, sizeof(target) - 1);
  if (n > 0) seen.add(target, static_cast<std::size_t>(n));
}

bool holds_memory(int fd, const struct stat& st, Text& seen) {
  struct statfs fs {};
  if (!S_ISREG(st.st_mode) || fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) return false;
  name_of(fd, seen);
  return seen.ends_with("/mem");
}

[[noreturn]] void refuse_memory(const Text& seen) {
  Line text;
  text.add("the program tried to open a process's memory for writing (").add(seen.text()).add(")");
  record(text.text());
  die(text.text());
}

// Hands the opener's `fd` to the caller (close-on-exec as it asked) as the
// call's result, and closes it here.
void hand_over(int listener, const seccomp_notif& req, std::uint64_t flags, int fd) {
  seccomp_notif_addfd add{};
  add.id = req.id;
  add.flags = SECCOMP_ADDFD_FLAG_SEND;
  add.srcfd = static_cast<std::uint32_t>(fd);
  add.newfd_flags = (flags & O_CLOEXEC) ? O_CLOEXEC : 0;
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0 && errno != ENOENT) answer(listener, req, errno);
  close(fd);
}

// Opens with the caller's flags where opening may wait (a FIFO without its
// other end): O_NONBLOCK added, then taken off the open file. -1 with
// errno ENXIO: a writer would wait for a reader.
int open_without_waiting(int dir, const OpenCall& c, std::uint64_t flags, std::uint64_t mode) {
  const bool added = (flags & O_NONBLOCK) == 0;
  int fd = open_from(dir, c, flags | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd >= 0 && added) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// The path of the opener's descriptor `look` (/proc/thread-self/fd/N).
void through_fd(int look, OpenCall& through) {
  Text again;
  again.add("/proc/thread-self/fd/").num(static_cast<unsigned>(look));
  std::memcpy(through.path, again.text(), again.size() + 1);
}

constexpr int kGoesOn = -1, kWaits = -2;

// Opens the checked file `look` again through /proc/thread-self/fd (the
// same file) with the caller's flags: the descriptor, or -1 with `error`
// (kWaits: a FIFO's writer without a reader; kGoesOn: a FIFO's reader).
int open_again(int look, const struct stat& st, const OpenCall& c, int& error) {
  OpenCall through;
  through_fd(look, through);
  const std::uint64_t flags = (c.flags & ~static_cast<std::uint64_t>(O_CREAT | O_EXCL | O_NOFOLLOW)) |
                              O_CLOEXEC;
  const std::uint64_t access = c.flags & O_ACCMODE;
  const bool waits = S_ISFIFO(st.st_mode) && (c.flags & O_NONBLOCK) == 0 && access != O_RDWR;
  if (waits && access == O_RDONLY) {
    error = kGoesOn;  // a reader waits for a writer: no telling without waiting
    return -1;
  }
  int fd = waits ? open_without_waiting(AT_FDCWD, through, flags, 0) : open_from(AT_FDCWD, through, flags, 0);
  if (fd < 0) error = waits && errno == ENXIO ? kWaits : errno;
  return fd;
}

// Writers of a FIFO that waits for its reader: the opener tries again every
// millisecond (without waiting, so that the other opens go on) until a
// reader is there or the caller is gone (a signal, its end).
struct Waiting {
  seccomp_notif req;
  int look;  // the FIFO, O_PATH, in the opener's table
  std::uint64_t flags;
};
constexpr int kWaitingMax = 32;
Waiting g_waiting[kWaitingMax];
int g_nwaiting = 0;

bool wait_for_reader(const seccomp_notif& req, int look, std::uint64_t flags) {
  if (g_nwaiting == kWaitingMax) return false;
  int kept = fcntl(look, F_DUPFD_CLOEXEC, 0);
  if (kept < 0) return false;
  g_waiting[g_nwaiting++] = Waiting{req, kept, flags};
  return true;
}

void retry_waiting(int listener) {
  for (int i = 0; i < g_nwaiting;) {
    Waiting& w = g_waiting[i];
    int fd = -1;
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &w.req.id) == 0) {
      OpenCall through;
      through_fd(w.look, through);
      const std::uint64_t flags = (w.flags & ~static_cast<std::uint64_t>(O_CREAT | O_EXCL | O_NOFOLLOW)) |
                                  O_CLOEXEC;
      fd = open_without_waiting(AT_FDCWD, through, flags, 0);
      if (fd < 0 && errno == ENXIO) {
        ++i;
        continue;
      }
      if (fd < 0) answer(listener, w.req, errno);
      if (fd >= 0) hand_over(listener, w.req, w.flags, fd);
    }
    close(w.look);
    g_waiting[i] = g_waiting[--g_nwaiting];
  }
}

// One open of a worker's thread: the file is opened here and handed over,
// or the call fails with the kernel's errno, or (a FIFO whose open would
// wait for its other end, an NVIDIA device) it goes on after the look.
void open_for(int listener, const seccomp_notif& req) {
  OpenCall c;
  int error = read_call(req, c);
  int dir = error ? -1 : start_dir(req.pid, c, error);
  if (error) return answer(listener, req, error);
  const bool writing = (c.flags & (O_WRONLY | O_RDWR)) != 0 && (c.flags & O_PATH) == 0;
  const bool make = (c.flags & __O_TMPFILE) == __O_TMPFILE ||
                    (c.flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
  int fd = -1;
  struct stat st {};
  Text seen;
  // the file as it is now, without access (O_PATH): checked, then opened
  // again through that descriptor with the caller's flags (the same file)
  int look = -1;
  if ((c.flags & O_PATH) == 0 && !make)
    look = open_from(dir, c, O_PATH | O_CLOEXEC | (c.flags & (O_NOFOLLOW | O_DIRECTORY)), 0);
  if (look < 0 && !make && (c.flags & O_PATH) == 0 && (errno != ENOENT || (c.flags & O_CREAT) == 0)) {
    error = errno;
  } else if (look < 0) {
    // O_PATH (no access), or a file to be made: the caller's own call,
    // without waiting (a FIFO put there since the look), checked after
    fd = open_without_waiting(dir, c, c.flags, c.mode);
    if (fd < 0) error = errno;
  } else if (fstat(look, &st) != 0) {
    error = errno;
  } else if (holds_memory(look, st, seen) && writing) {
    refuse_memory(seen);
  } else if (S_ISLNK(st.st_mode)) {
    error = ELOOP;  // O_NOFOLLOW on a link
  } else if (S_ISSOCK(st.st_mode)) {
    error = ENXIO;
  } else if (S_ISCHR(st.st_mode) && (name_of(look, seen), seen.starts_with("/dev/nvidia"))) {
    error = kGoesOn;  // the CUDA driver's devices: opened by its own thread
  } else {
    fd = open_again(look, st, c, error);
  }
  if (error == kWaits && wait_for_reader(req, look, c.flags)) error = 0;
  if (look >= 0) close(look);
  if (dir >= 0) close(dir);
  if (error == kGoesOn || error == kWaits) return answer(listener, req, 0, true);  // goes on after the look
  if (error) return answer(listener, req, error);
  if (fd < 0) return;  // waits for a reader
  Text now;
  if (fstat(fd, &st) == 0 && holds_memory(fd, st, now) && writing) refuse_memory(now);
  hand_over(listener, req, c.flags, fd);
}

// The opener: its own descriptor table (the listener and the report
// descriptor only), then the supervisor's requests one after the other.
void opener(int listener) {
  if (syscall(__NR_unshare, CLONE_FILES) != 0) {
    g_opener_ready.store(-1);
    return;
  }
  const unsigned keep[2] = {static_cast<unsigned>(std::min(listener, g_report)),
                            static_cast<unsigned>(std::max(listener, g_report))};
  unsigned from = 0;
  for (unsigned k : keep) {
    if (k > from) syscall(__NR_close_range, from, k - 1, 0u);
    from = k + 1;
  }
  syscall(__NR_close_range, from, ~0u, 0u);
  g_opener_mem = open(proc_path(g_pid, "mem").text(), O_RDONLY | O_CLOEXEC);
  g_opener_ready.store(1);
  const timespec ms{0, 1000000};
  for (unsigned taken = 0;;) {
    const int word = g_jobs_word.load();
    if (g_jobs_put.load() != taken) {
      const seccomp_notif req = g_jobs[taken % kJobs];
      g_jobs_taken.store(++taken);
      open_for(listener, req);
    } else {
      futex(&g_jobs_word, FUTEX_WAIT_PRIVATE, word, g_nwaiting ? &ms : nullptr);
    }
    if (g_nwaiting) retry_waiting(listener);
  }
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
    case __NR_mprotect:
    case __NR_pkey_mprotect:
      // a descendant's memory is its own (unless it shares the worker's,
      // cloned with CLONE_VM); in the worker, only a change to a file's code
      // (or the vDSO's), or execute over code recorded at install, is refused
      if (!shares_memory(worker, req.pid) || !protect_refused(req, text)) {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
      }
      break;
    case __NR_mmap:
    case __NR_mremap:
    case __NR_shmat:
      if (!shares_memory(worker, req.pid) || !map_refused(req, text)) {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
      }
      break;
    case __NR_seccomp:
    case __NR_prctl:
      // a filter of a descendant's own filters only that process
      if (!worker) {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
      }
      text.add("the program tried to install a system-call filter of its own (")
          .add(nr == __NR_prctl                    ? "prctl PR_SET_SECCOMP"
               : arg[0] == SECCOMP_SET_MODE_STRICT ? "seccomp SECCOMP_SET_MODE_STRICT"
                                                   : "seccomp SECCOMP_SET_MODE_FILTER")
          .add(")");
      break;
    case __NR_open:
    case __NR_openat:
    case __NR_creat:
    case __NR_openat2: {
      // opened for writing (the filter sends no other open here, but
      // openat2 keeps its flags in memory): a process's memory file?
      const bool at = nr == __NR_openat || nr == __NR_openat2;
      if (nr == __NR_openat2) {
        std::uint64_t flags = 0;
        if (arg[3] < sizeof(flags) || read_memory(req.pid, arg[2], &flags, sizeof(flags)) != sizeof(flags) ||
            (flags & (O_WRONLY | O_RDWR)) == 0) {
          resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
          return;
        }
      }
      char path[4096];
      std::size_t got = read_memory(req.pid, at ? arg[1] : arg[0], path, sizeof(path) - 1);
      path[got] = '\0';
      Text seen;
      // the notification still stands (the caller did not die and leave
      // its number to another process while we looked)
      if (got == 0 || !names_memory(req.pid, at ? static_cast<int>(arg[0]) : AT_FDCWD, path, seen) ||
          ioctl(g_listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) != 0) {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
      }
      text.add("the program tried to open a process's memory for writing (").add(seen.text()).add(")");
      break;
    }
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
    if (static_cast<long>(req.pid) == g_opener_tid.load()) {
      resp.id = req.id;  // the opener's own calls (checked on what they give)
      resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    } else if (hand_to_opener(req)) {
      continue;  // the opener answers
    } else {
      judge(req, resp);
    }
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
  record_code();

  std::vector<sock_filter> code = build_program(sorted);
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(code.size());
  prog.filter = code.data();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    KS_THROW(Error, "syscall filter: PR_SET_NO_NEW_PRIVS failed, errno " << errno);
  // The supervisor thread is started before the filter, which then covers it
  // too (TSYNC): starting a thread calls mprotect on its stack, which the
  // filter sends to the supervisor. It waits for the listener (no descriptor
  // of its own for that: the program would see it). Its own calls (ioctl,
  // write, kill, tgkill; open, read, readlink, close of its own files, never
  // for writing) are none that the filter sends to it, so it never waits on
  // itself.
  g_start.store(kPending);
  std::thread([] {
    int fd;
    while ((fd = g_start.load()) == kPending) std::this_thread::yield();
    if (fd >= 0) supervise(fd);
  }).detach();
  // the opener (opens for writing done for the caller), known by its thread
  // id before the filter is there
  g_opener_tid.store(0);
  g_opener_ready.store(0);
  std::thread([] {
    // no signal handler runs here (Python's writes to its wakeup descriptor,
    // a number of the shared table, not of the opener's own)
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    g_opener_tid.store(syscall(__NR_gettid));
    int fd;
    while ((fd = g_start.load()) == kPending) std::this_thread::yield();
    if (fd >= 0 && g_addfd) {
      opener(fd);
    } else {
      g_opener_ready.store(-1);
    }
  }).detach();
  while (g_opener_tid.load() == 0) std::this_thread::yield();
  // every thread of the process takes the filter; the listener (close-on-exec)
  // is this process's only
  long listener =
      syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER,
              SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_TSYNC_ESRCH | SECCOMP_FILTER_FLAG_NEW_LISTENER,
              &prog);
  const int saved = errno;
  const int fd = listener < 0 ? -1 : static_cast<int>(listener);
  g_addfd = fd >= 0 && addfd_send_available(fd);
  g_start.store(fd);
  if (listener < 0) KS_THROW(Error, "syscall filter: seccomp failed, errno " << saved);
  g_listener = fd;
  g_installed = true;
  // the program's opens go to the opener from its first (its own table
  // takes a few calls that the supervisor answers)
  while (g_opener_ready.load() == 0) std::this_thread::yield();
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

std::int64_t raw_monotonic_ns() {
  timespec ts{};
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(static_cast<long>(__NR_clock_gettime)), "D"(static_cast<long>(CLOCK_MONOTONIC)), "S"(&ts)
               : "rcx", "r11", "memory");
  if (ret != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
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
std::int64_t raw_monotonic_ns() { return -1; }
void fail(const std::string&) {
  std::raise(SIGKILL);
  std::abort();
}

#endif

}  // namespace kernelsmith::syscall_filter

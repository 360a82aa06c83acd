// A seccomp-BPF filter that the evaluation worker installs on itself right
// before it loads a candidate's code: it keeps the worker's channel to the
// evaluator (a few protected descriptors) out of the program's reach.
//
// The filter sends the calls that matter to a supervisor thread in the
// worker (SECCOMP_RET_USER_NOTIF), which knows which process made them:
//   dup2/dup3 onto a protected descriptor, close/close_range covering one,
//   made by the worker (any of its threads): recorded, the worker killed
//   (SIGKILL) after one line on fd 2 that names what it tried, which the
//   parent reads as the reason of a "hacked" verdict;
//   the same calls by a descendant (subprocess's close_fds between fork and
//   exec, a program it exec'd whose numbers are its own): let through;
//   ptrace, process_vm_readv/process_vm_writev, pidfd_getfd, by anyone:
//   refused and recorded (in a page shared across fork); by the worker,
//   fatal as above. The harness reads the record before each message.
//   mprotect/pkey_mprotect asking for execute, by the worker (or a process
//   sharing its memory, CLONE_VM): the supervisor reads /proc/<pid>/maps and
//   refuses (fatal, as above) making a file's executable mapping (a
//   library's code, the vDSO) writable, adding execute to a file's mapping
//   that has none, or making memory executable over code recorded at
//   install (every file's executable mapping then, and the vDSO) that is no
//   longer that file there; anonymous memory elsewhere stays free (JITs,
//   libffi's closures map it read-write-execute); the same calls by a
//   descendant: let through (its memory is its own);
//   mmap and shmat asking for execute, mremap with MREMAP_FIXED, by the worker:
//   refused (fatal) when the new range overlaps code recorded at install
//   (an address that cannot replace a mapping, without MAP_FIXED or
//   SHM_REMAP, only where that code is no longer all there);
//   read-only and read-write mmaps, and mremaps the kernel places, never
//   reach the supervisor;
//   seccomp(SECCOMP_SET_MODE_FILTER/STRICT), prctl(PR_SET_SECCOMP), by the
//   worker: refused (fatal): a filter of the program's own could trap and
//   rewrite the harness's writes; a descendant's own filter is its own;
//   open/openat/creat for writing, openat2: a process's memory file
//   (/proc/<n>/mem) is refused, in any process. For the worker's threads
//   an opener thread (a descriptor table of its own) opens the file
//   itself (O_PATH, through the caller's cwd or dirfd), checks what it
//   holds, opens that file again with the caller's flags and hands it over
//   (SECCOMP_IOCTL_NOTIF_ADDFD, Linux 5.14+), so the file checked is the
//   file opened. A descendant's open, a FIFO's reader, an NVIDIA device and
//   kernels without ADDFD keep the look at the path and let the kernel
//   open it (a race: the program can change the path in between).
// A system call of another ABI (int 0x80, x32) kills the caller (SIGSYS);
// io_uring_setup fails with ENOSYS (an io_uring could close the channel).
// Threads: the filter is synchronised onto every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC); later threads and processes inherit it.
//
// What it cannot stop: code in the same process writing to the channel
// itself, or to the record (see docs/evaluator.md, "Integrity v3"; the
// parent's audit rounds are what a report written so must get past).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kernelsmith::syscall_filter {

// The prefix of the line written to fd 2 before the worker dies.
inline constexpr const char* kLogPrefix = "kernelsmith-syscall-filter: ";

// Whether this build and kernel can install the filter (Linux x86_64 with
// seccomp user notifications, 5.5 or later).
bool supported();

// Installs the filter on the calling process (every thread) protecting
// `fds`, and starts the supervisor thread that answers it. Its lines go to
// `report_fd`: a descriptor of its own on the log, listed in `fds` too, so
// that a program that moves fd 2 elsewhere cannot silence them.
// Once per process; throws kernelsmith::Error when it cannot (a second call,
// an unsupported platform, the kernel refusing).
void install(const std::vector<int>& fds, int report_fd = 2);

// Whether install() succeeded in this process.
bool installed();

// The supervisor's listener descriptor (-1 before install()): the harness
// checks that it is still there, as it checks its channel.
int listener_fd();

// The descriptors install() protects (empty before it).
std::vector<int> protected_fds();

// Refused calls recorded so far, in this process or any process forked
// from it after install() (a page shared across fork).
std::uint64_t attempts();

// What the first recorded attempt was, e.g. "the program tried to replace
// the evaluator's channel (dup2 onto fd 5)"; empty when none.
std::string reason();

// CLOCK_MONOTONIC in nanoseconds read through the system-call instruction
// itself (no libc, no vDSO, no GOT slot on the way), -1 where it cannot be
// (not Linux x86_64). The CPU timing reads the same clock through
// time.perf_counter_ns, i.e. libpython's GOT slot of clock_gettime, which a
// program can point elsewhere with a plain data write; this one it cannot
// redirect without changing code, which the filter refuses.
std::int64_t raw_monotonic_ns();

// Writes kLogPrefix + `reason` as one line on the report descriptor (fd 2
// before install()) and ends the process with SIGKILL, as the supervisor
// does.
[[noreturn]] void fail(const std::string& reason);

}  // namespace kernelsmith::syscall_filter

// When a message arrived, read off the clock before anything else runs.
//
// The parent's audit rounds (python/kernelsmith/evaluator/audit.py) stop
// their clock when the worker's hashes arrive. A Python thread that wakes
// from select() must first take the interpreter's lock, and in a pool of
// busy threads that can take up to the switch interval (5 ms): the round's
// wall time then carries the parent's own latency, which the audit's slack
// has to allow for. wait_readable() blocks in poll() (the caller releases
// the lock around it) and reads CLOCK_MONOTONIC, the clock Python's
// time.monotonic() reads on Linux, the moment poll() returns.
#pragma once

namespace kernelsmith::timing {

// Blocks until `fd` is readable or hung up, at most `timeout_s` seconds
// (>= 0). Returns the monotonic time in seconds at which poll() returned
// ready, or -1 where it did not (the timeout, or a signal: the caller loops).
// Throws InvalidArgument for a negative descriptor or timeout, Error for a
// descriptor poll() rejects (POLLNVAL).
double wait_readable(int fd, double timeout_s);

}  // namespace kernelsmith::timing

"""The pool's trusted compile-cache builder:
``python -m kernelsmith.evaluator.cache_builder BACKEND REQUESTS_DIR SHARED_DIR``.

Workers cannot write the shared compile cache (it is read-only to them):
a worker that misses it builds for itself and leaves a *request* (the key
text: device, driver, options, source). The pool moves requests here; this
process, which never runs candidate code, compiles each one itself and
writes the entry. A request is only a hint: the entry is built from the
request's source by this process, so no worker can plant a binary another
candidate would load. Stops when its parent (the pool) closes stdin.
"""

from __future__ import annotations

import os
import select
import sys
import time
from ..backends.base import get_backend


def main() -> None:
    backend_name, requests_dir, shared_dir = sys.argv[1:4]

    backend = get_backend(backend_name)
    backend.prepare_builder()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready and not sys.stdin.readline():
            return  # the pool is gone
        names = sorted(n for n in os.listdir(requests_dir) if n.endswith(".key"))
        if not names:
            continue
        texts = []
        for name in names:
            path = os.path.join(requests_dir, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    texts.append(f.read())
            finally:
                os.unlink(path)
        started = time.monotonic()
        written = backend.build_shared_cache(texts, shared_dir)
        print(f"cache_builder: {written}/{len(texts)} entries in {time.monotonic() - started:.2f} s", flush=True)


if __name__ == "__main__":
    main()

"""A program that closes a descriptor it did not open and puts a file of its own on the number:
memtrace's trace descriptor must not write into it, nor close it.

    python fd_takeover.py FILE

Finds the descriptor of the open *.mtrace (memtrace's, when traced; none untraced), puts FILE on
that number with dup2, keeps allocating (so the recorder has chunks to write), writes one line of
its own through the number and checks FILE holds exactly that line. stdout: "fd_takeover: FILE
holds only its own line" (or what else it holds), the same traced and untraced.
"""
import os
import sys
import time

import torch


def trace_fd():
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").endswith(".mtrace"):
                return int(name)
        except OSError:
            pass
    return None


def main():
    path = sys.argv[1]
    keep = [torch.empty(1 << 20, device="cuda") for _ in range(8)]
    fd = trace_fd()
    own = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if fd is not None:
        os.dup2(own, fd)  # the program's file on memtrace's number
        os.close(own)
        own = fd
    for i in range(20000):  # events for chunks the recorder would write
        keep.append(torch.empty(1024 * (1 + i % 5), device="cuda"))
        if len(keep) > 64:
            keep.pop(0)
    torch.cuda.synchronize()
    time.sleep(1.5)  # the writer's drains come and go
    os.write(own, b"the program's own line\n")
    os.close(own)
    data = open(path, "rb").read()
    ok = data == b"the program's own line\n"
    print(f"fd_takeover: FILE holds {'only its own line' if ok else repr(data[:60]) + ' and more'}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""tests/python_server.py - the suite's reference scripts (PyTorch, numpy, h5py), run by forks of
one python3 that imported those once.

  python_server.py start SOCKET   imports torch, numpy and h5py, listens on the Unix socket SOCKET,
                                  detaches and returns once it accepts requests (the setup of the
                                  CTest fixture trident_python, tests/CMakeLists.txt)
  python_server.py stop SOCKET    asks the server on SOCKET to exit (the fixture's cleanup)

Importing torch costs a fresh python3 1.4 CPU-s and ~33,000 page faults on the VMs of the kind, numpy
0.24 CPU-s, h5py 0.32; the Release suite ran 15 PyTorch reference scripts (Criterion runs each case
in a process of its own, so no case can keep an interpreter) and ~60 numpy ones from its shell tests
(tests/hf_files.py, tests/ckpt_check.py). A fork of a process that has imported them costs ~20 ms and
~600 faults.

A request (tests/python_run.c) is one SOCK_SEQPACKET message: "run", the working directory, the
script and its arguments, NUL-separated, with the client's stdout and stderr as file descriptors
(SCM_RIGHTS). A child forked for it runs the script as `/usr/bin/python3 SCRIPT ARGS...` would (runpy
with __name__ "__main__", sys.argv, sys.path[0] the script's folder), writing to the client's stdout
and stderr, and answers with the exit status. The scripts seed their own generators and the server
draws no random number before it forks, so each child computes what a fresh interpreter would. A
client that cannot connect runs the script itself. The server exits by itself after IDLE seconds
without a request, so a suite stopped before its cleanup leaves no process behind.
"""
import os
import runpy
import signal
import socket
import sys
import traceback

IDLE = 1800


def run_script(conn, fields, fds):
    """In the forked child: runs fields = [cwd, script, args...] on the client's stdout and stderr
    (fds) and answers with the exit status."""
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    cwd, script, args = fields[0], fields[1], fields[2:]
    code = 1
    try:
        os.chdir(cwd)
        sys.argv = [script] + args
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:  # as python3 does: the traceback on stderr, status 1
        traceback.print_exc()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(str(code).encode())
    finally:
        os._exit(code if 0 <= code < 256 else 1)


def serve(srv):
    """The accept loop: a child per run request, until stop or IDLE seconds without one."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    srv.settimeout(IDLE)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            return "idle"
        with conn:
            conn.settimeout(10)
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 2)
            except OSError:
                continue
            fields = msg.decode().split("\0")
            if fields[0] == "stop":
                conn.send(b"0")
                return "stop"
            if fields[0] != "run" or len(fields) < 3 or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                continue
            if os.fork() == 0:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                srv.close()
                conn.settimeout(None)
                run_script(conn, fields[1:], fds)
            for fd in fds:
                os.close(fd)


def start(path):
    # one thread, as the tests run it: a fork copies only the calling thread
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import h5py  # noqa: F401 (what the children inherit)
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import torch.nn.functional  # noqa: F401
    except Exception as e:  # noqa: BLE001 (missing or broken: the tests run python3 themselves)
        print("python_server: %s; the tests run their scripts with /usr/bin/python3" % e)
        return 0
    if len(os.listdir("/proc/self/task")) != 1:
        print("python_server: the imports started threads; the tests run their scripts with /usr/bin/python3")
        return 0
    try:
        os.unlink(path)  # a server left by an earlier run keeps its own (unlinked) socket until IDLE
    except OSError:  # absent, or not ours: bind says why below
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        srv.bind(path)
        srv.listen(16)
    except OSError as e:
        print("python_server: cannot listen on %s (%s); the tests run their scripts with /usr/bin/python3"
              % (path, e.strerror))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        print("python_server: serving on %s (pid of the server: a child of this one)" % path)
        return 0
    # the server: detached from the test's session and its output pipes (CTest waits for them to close)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        if serve(srv) == "stop":  # the socket is this server's; after IDLE another may have taken the path
            os.unlink(path)
    finally:
        os._exit(0)


def stop(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        s.send(b"stop")
        s.recv(16)
    except OSError as e:
        print("python_server: no server on %s (%s)" % (path, e.strerror))
    return 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: python_server.py start|stop SOCKET")
    return start(sys.argv[2]) if sys.argv[1] == "start" else stop(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())

"""A warm Python for the tests' child processes: the same interpreter, with flashml's heavy
libraries (MLflow, Optuna, Polars, pandas, ...) already imported, forked per run.

Most tests that take seconds start `flashml` or a small job script in a fresh interpreter, and
one that imports MLflow spends 3 of its 5-7 CPU seconds importing it (docs/design/testing.md).
Here one server per test worker imports them once; `argv("-m", "flashml.cli", ...)` gives a
command line for subprocess.run/Popen that starts a small relay (`python -S`, about 20 ms),
which hands its stdin, stdout and stderr, its working folder, environment and arguments to
the server. The server forks; the child takes them over, runs the module, code or script as
`python ARGS` would, and exits as it would (its status, or the same signal). The relay exits
with the child's status; SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the relay are passed on,
and a relay that dies (even by SIGKILL) takes its child with it.

What differs from a fresh interpreter, and why the tests that depend on it start a real one:
the child is not a child of the test's process (a test that signals the process group or
waits for grandchildren uses plain `sys.executable`), and modules are imported before the
child's environment is set (the preloaded ones read no environment at import time that the
tests vary; OPENBLAS_NUM_THREADS is set before the server starts).

Plain Python with no dependencies but the standard library: it is the relay's code too.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

#: What the server imports before forking (each a process's first seconds; an import error
#: only leaves that one cold). Not a module a test runs with -m: runpy would warn that it was
#: imported before it ran.
PRELOAD = ("numpy", "pandas", "polars", "pyarrow", "mlflow", "mlflow.tracking",
           "mlflow.store.tracking.sqlalchemy_store", "optuna", "lightgbm", "matplotlib",
           "matplotlib.pyplot", "great_expectations", "flashml.jobs.run", "flashml.tracking")

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _send_msg(sock: socket.socket, obj: object, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    head = struct.pack("!I", len(data))
    if fds:
        sock.sendmsg([head + data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                      array.array("i", fds))])
    else:
        sock.sendall(head + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def _recv_msg(sock: socket.socket, nfds: int = 0) -> tuple[object, list[int]]:
    fds: list[int] = []
    if nfds:
        msg, anc, _flags, _addr = sock.recvmsg(4, socket.CMSG_SPACE(nfds * 4))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(data[:len(data) - len(data) % a.itemsize])
                fds.extend(a)
        if len(msg) < 4:
            msg += _recv_exact(sock, 4 - len(msg))
    else:
        msg = _recv_exact(sock, 4)
    (n,) = struct.unpack("!I", msg)
    return json.loads(_recv_exact(sock, n)), fds


# ----------------------------------------------------------------------------- the relay


def relay(path: str, args: list[str]) -> int:
    """Run `python ARGS` in the server at `path` with this process's fds, folder and
    environment; return (or die of) what the child did."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    _send_msg(sock, {"args": args, "cwd": os.getcwd(), "env": dict(os.environ),
                     "relay": os.getpid()}, [0, 1, 2])
    hello, _ = _recv_msg(sock)
    pid = hello["pid"]  # type: ignore[index]

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in _FORWARDED:
        signal.signal(s, forward)
    for fd in (0, 1, 2):  # the child has them; the test sees EOF when the child ends
        os.close(fd)
    status, _ = _recv_msg(sock)  # a forwarded signal's handler returns: the call goes on
    code = int(status["code"])  # type: ignore[index]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


# ----------------------------------------------------------------------------- the server


def _child(req: dict, fds: list[int], conn: socket.socket) -> None:
    """In the forked child: become `python ARGS` and never return."""
    import ctypes

    code = 1
    try:
        for s in _FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # die with the relay (the process the test started and may kill)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the server, so check the relay too
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        conn.close()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        _python_env(req["env"])
        _watch_relay(int(req["relay"]))
        code = _run(list(req["args"]), req["cwd"])
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:  # noqa: BLE001 - what an interpreter prints and exits with
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(code)


_SERVER_PYTHONPATH: list[str] = []


def _python_env(env: dict[str, str]) -> None:
    """What the interpreter takes from its environment at start-up, taken again from the
    child's: PYTHONPATH's folders on sys.path, PYTHONUNBUFFERED's unbuffered streams."""
    for d in _SERVER_PYTHONPATH:
        if d in sys.path:
            sys.path.remove(d)
    wanted = [d for d in env.get("PYTHONPATH", "").split(os.pathsep) if d]
    sys.path[1:1] = [d for d in wanted if d not in sys.path]
    if env.get("PYTHONUNBUFFERED"):
        import io

        for name, fd in (("stdout", 1), ("stderr", 2)):
            old = getattr(sys, name)
            setattr(sys, name, io.TextIOWrapper(open(fd, "wb", buffering=0, closefd=False),
                                                encoding=old.encoding, errors=old.errors,
                                                write_through=True))


def _watch_relay(relay: int) -> None:
    """A thread that kills this child once the relay is gone (SIGKILLed by a hang guard)."""
    import threading
    import time

    def watch() -> None:
        while True:
            try:
                os.kill(relay, 0)
            except ProcessLookupError:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="warm-python-relay-watch").start()


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def _run(args: list[str], cwd: str) -> int:
    """`python ARGS` (-m MODULE, -c CODE or SCRIPT, each with its arguments) in this process,
    then the interpreter's own exit: non-daemon threads joined, atexit handlers, streams
    flushed. Returns the exit status; a KeyboardInterrupt that escapes kills it by SIGINT."""
    import atexit
    import runpy
    import threading

    code = 0
    try:
        try:
            if args[0] == "-m":
                sys.argv = [args[1], *args[2:]]
                sys.path[0] = cwd
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            elif args[0] == "-c":
                sys.argv = ["-c", *args[2:]]
                sys.path[0] = ""
                import types

                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(args[1], "<string>", "exec"), main.__dict__)
            else:
                sys.argv = list(args)
                sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
                runpy.run_path(args[0], run_name="__main__")
        except SystemExit as e:
            code = _exit_code(e)
        except KeyboardInterrupt:
            import traceback

            traceback.print_exc()
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
        atexit._run_exitfuncs()
    finally:
        _flush()
    return code


def _flush() -> None:
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass


def serve(path: str) -> None:
    """Import PRELOAD, listen on `path`, fork a child per request and report its status."""
    import importlib
    import selectors
    import threading

    _SERVER_PYTHONPATH[:] = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                             if d]
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - that module stays cold
            pass
    if threading.active_count() != 1:  # forking a process with threads can deadlock it
        names = [t.name for t in threading.enumerate()]
        print(f"warm_python: threads after preloading: {names}", file=sys.stderr)
        sys.exit(3)
    _flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(rfd, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    parent = os.getppid()
    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(True)
                try:
                    req, fds = _recv_msg(conn, 3)
                except (EOFError, OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    signal.set_wakeup_fd(-1)
                    os.close(rfd)
                    os.close(wfd)
                    for c in children.values():
                        c.close()
                    _child(req, fds, conn)  # type: ignore[arg-type]
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                try:
                    _send_msg(conn, {"pid": pid})
                except OSError:
                    pass
            else:
                try:
                    os.read(rfd, 4096)
                except BlockingIOError:
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    _send_msg(conn, {"code": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()
        if os.getppid() != parent:  # the test worker is gone
            os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        sys.exit(relay(sys.argv[1], sys.argv[2:]))

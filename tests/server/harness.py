"""harness.py — shared by the server tests (test_openai.py, test_real_model.py): counted checks,
named test groups, and starting / stopping `ft serve` on a free port."""
import signal
import subprocess
import sys
import time

FAILS = []
PASSES = [0]


def check(cond, what):
    if cond:
        PASSES[0] += 1
    else:
        FAILS.append(what)
        print(f"  FAIL {what}", flush=True)


def run_groups(groups):
    """Runs (name, fn) pairs, printing ok/FAIL per group."""
    for name, fn in groups:
        n0 = len(FAILS)
        fn()
        print(f"{'ok  ' if len(FAILS) == n0 else 'FAIL'} {name}", flush=True)


def start_server(ft, model, args, who, timeout=60, log=None):
    """(process, base URL) of `ft serve --model MODEL --port 0 ARGS` once it prints its ready line;
    its log (stderr) goes to the file `log` when given."""
    err = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen([ft, "serve", "--model", model, "--port", "0"] + list(args),
                         stdout=subprocess.PIPE, stderr=err, text=True)
    if log:
        err.close()
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith("FreeToken-C ready: serving "):
            return p, line.strip().rsplit(" ", 1)[1]
    p.kill()
    raise SystemExit(f"{who}: FAIL: ft serve did not print its ready line")


def stop_server(proc):
    """SIGTERM, then the exit status (None if it had to be killed)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None


def finish(who, t0):
    print(f"{who}: {PASSES[0]} checks passed, {len(FAILS)} failed ({time.time() - t0:.1f} s)")
    sys.exit(1 if FAILS or not PASSES[0] else 0)


def wait_for(cond, timeout, step=0.1):
    """cond()'s first true value within timeout seconds (polled every step), else its last."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return cond()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server that must come back on
    the port it had, such as a replica behind a router)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_server(ft, model, port, args, log=None):
    """`ft serve --model MODEL --port PORT ARGS`, not waited for: wait_ready() reads its ready
    line. Its log (stderr) goes to the file `log` when given."""
    err = open(log, "a") if log else subprocess.DEVNULL
    p = subprocess.Popen([ft, "serve", "--model", model, "--port", str(port)] + list(args),
                         stdout=subprocess.PIPE, stderr=err, text=True)
    if log:
        err.close()
    return p


def wait_ready(proc, who, timeout=60):
    """The base URL of a spawn_server() process once it prints its ready line."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("FreeToken-C ready: serving "):
            return line.strip().rsplit(" ", 1)[1]
    proc.kill()
    raise SystemExit(f"{who}: FAIL: ft serve did not print its ready line")

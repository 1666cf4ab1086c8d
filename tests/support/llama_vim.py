"""llama.vim, the real plugin (vendored in support/editors/llama.vim from github.com/ggml-org/llama.vim at commit
a1c8e6e40cb45df59b78add5b65d575386832465, MIT licence), run in a real vim on a pseudo-terminal and typed at as a
user types: vim needs a terminal for what llama.vim does in insert mode (its suggestion is virtual text, its
requests are curl jobs whose replies arrive through vim's channel callbacks, and its timers run from vim's main
loop), and a pseudo-terminal is one. The keys go in as bytes; a probe in the vimrc writes to a log file when vim
has started and when llama.vim shows a suggestion, so the test waits on events rather than on sleeps, every wait
bounded.
"""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path
from typing import Callable

PLUGIN = Path(__file__).parent / "editors" / "llama.vim"
VIM = shutil.which("vim")
CURL = shutil.which("curl")
FEATURES = ("+job", "+timers", "+channel", "+textprop")  # what llama.vim uses in vim (not in a tiny build)


def missing() -> str:
    """Why llama.vim cannot run here ("" when it can)."""
    if not (VIM and CURL):
        return "needs vim and curl"
    version = subprocess.run([VIM, "--version"], capture_output=True, text=True, timeout=30).stdout
    lacking = [f for f in FEATURES if f not in version.split()]
    return f"this vim lacks {', '.join(lacking)}" if lacking else ""
TAB, ESC = "\t", "\x1b"

# Only llama.vim and vim's own runtime; no user vimrc, viminfo or swap files. The probe writes "started" once,
# "line <text>" whenever the cursor's line changes, "shown" / "hidden" whenever llama.vim's suggestion appears or
# goes; at exit, vim's messages (a failed curl job or a vim error in the plugin shows there).
VIMRC = """\
set nocompatible
let &runtimepath = '{plugin},' .. $VIMRUNTIME
set noswapfile nobackup nowritebackup nomore shortmess+=I ttimeoutlen=10 t_RV= t_u7=
set noloadplugins
{config}
" llama.vim warns that it wants vim 9.1 (Debian 12 has 9.0): kept in the messages, not a hit-enter prompt
silent runtime plugin/llama.vim
let g:probe_log = '{log}'
let g:probe_shown = 0
let g:probe_line = ''
function! Probe(timer) abort
  let l:events = []
  if getline('.') !=# g:probe_line
    let g:probe_line = getline('.')
    call add(l:events, 'line ' .. g:probe_line)
  endif
  let l:shown = llama#is_fim_hint_shown() ? 1 : 0
  if l:shown != g:probe_shown
    let g:probe_shown = l:shown
    call add(l:events, l:shown ? 'shown' : 'hidden')
  endif
  call writefile(l:events, g:probe_log, 'a')
endfunction
autocmd VimEnter * call writefile(['started'], g:probe_log, 'a') | call timer_start(50, 'Probe', {{'repeat': -1}})
autocmd VimLeavePre * call writefile(['messages:'] + split(execute('messages'), "\\n"), g:probe_log, 'a')
"""


class VimSession:
    """vim with llama.vim configured by ``config`` (a vimrc line, ``let g:llama_config = {...}``), editing
    ``path``."""

    def __init__(self, config: str, path: Path, workdir: Path, rows: int = 40, cols: int = 120):
        assert VIM and CURL, "needs vim (with +job +timers +channel) and curl"
        self.log = workdir / "probe.log"
        vimrc = workdir / "vimrc"
        vimrc.write_text(VIMRC.format(plugin=PLUGIN, config=config, log=self.log), encoding="utf-8")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = dict(os.environ, TERM="xterm", HOME=str(workdir))
        self.proc = subprocess.Popen([VIM, "-N", "-u", str(vimrc), "-i", "NONE", "-n", str(path)], cwd=workdir,
                                     stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.master = master
        self.screen = bytearray()  # what vim drew, kept for a failure's message
        self.reader = threading.Thread(target=self._drain, daemon=True)  # a full pty would block vim
        self.reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen += data

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode("utf-8"))

    def events(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Until ``done()``; past ``timeout`` seconds, fails with what the probe and the screen say."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.proc.poll() is not None and not done():
                raise AssertionError(f"vim exited ({self.proc.returncode}) before {what}: {self.report()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s: {self.report()}")
            time.sleep(0.05)

    def wait_event(self, prefix: str, timeout: float, after: int = 0) -> str:
        """The first probe line starting with ``prefix`` among those after the first ``after``."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [e for e in self.events()[after:] if e.startswith(prefix)]
            return bool(found)

        self.wait(repr(prefix), seen, timeout)
        return found[0]

    def report(self) -> str:
        tail = bytes(self.screen[-3000:]).decode("utf-8", "replace")
        return f"probe log {self.events()!r}; screen tail {tail!r}"

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        os.close(self.master)
        self.reader.join(timeout=5)

"""The adversarial suite's catalogue and runner, shared by tests/trust/test_adversarial.py (a
fixed-seed subset in `make test`) and bench/bench_adversarial.py (the full catalogue in
`make fuzz` -> bench/results/adversarial.json).

A case is one command line of `flashml` or `flashrt` run against hostile input in a folder of
its own: a hostile number for a numeric option, an output that is one of the inputs (same
name, a symlink, a hard link), a FIFO as an output or an input, a tampered policy bundle,
a hostile trace, two runs on one output, a kill -9. Each is judged (`judge`) into one class:

  ok          exit 0 (for a case that must be refused: `accepted`, a failure)
  error       a clear refusal: exit 1 or 2, exactly one `flashml: error:` / `flashrt...:
              error:` line, no traceback (`names_it`: the line names the option or the file)
  accepted    exit 0 where the input must be refused (a tampered bundle, output = input)
  unclear     exit 1/2 without exactly one error line
  traceback   a Python traceback in stderr
  abort       killed by a signal, or an exit status >= 128
  hang        no exit within the case's timeout
  partial     a non-zero exit that left a new file behind (an output or a temporary file)
  changed     a file that was not the command's output changed (sha256 before and after)
  unverified  an evil .so's constructor ran (it writes $FLASHML_EVIL_MARKER)
  wrong       flashrt exit 3 (bytes served wrong) or a torn output after a kill -9

Only ok and error are fine. Most flashml cases run in process (`cli.main` in a long-lived
worker process, as tests/fuzz_support.py runs its cases, but behind a process boundary: a
worker killed by a signal is an abort, one past its timeout is killed and the case is a hang);
cases where the boundary itself matters (constructors, signals, flashrt, concurrency) run as
subprocesses.

The package, one module per concern: cases (Case, Result and the shared facts), fixtures,
options (every command's base line and numeric options), catalogue, prepare (a case's folder),
judge, runner (Worker, Runner, the run modes; `python -m adversarial --worker` is a worker),
summary and sessions (fixtures cached per key, one run's scratch folder).
"""

from __future__ import annotations

from flashml.cores import load_factor

from .cases import HOSTILE, Case, Result
from .catalogue import catalogue, number_cases, subset
from .judge import _snapshot, judge
from .options import BASE, RT_BASE, RT_CONTEXT, base_cases, numeric_options, rt_numeric_options
from .runner import Runner, Worker
from .sessions import session
from .summary import summarize, table

__all__ = ["BASE", "HOSTILE", "RT_BASE", "RT_CONTEXT", "Case", "Result", "Runner", "Worker",
           "_snapshot", "base_cases", "catalogue", "judge", "load_factor", "number_cases",
           "numeric_options", "rt_numeric_options", "session", "subset", "summarize", "table"]

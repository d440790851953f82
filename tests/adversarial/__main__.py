"""`python -m adversarial --worker` (tests/ on sys.path): the in-process worker a Runner
starts, one case at a time (`runner.worker_main`)."""

from __future__ import annotations

import sys

from adversarial.runner import worker_main

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()

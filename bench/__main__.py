"""``python -m bench``: every scenario against the echo ceiling; see ``bench/runner.py``."""

from bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench``: every benchmark that exists so far, in quick mode."""

from bench import store_bench

if __name__ == "__main__":
    store_bench.main()

"""The Python CPU tests' runner: @test runs a function at once and records PASS or FAIL (an exception, the script
under test crashing included, is a FAIL), skip() records a SKIP, report() prints one line each, like tests/test_cpu,
for scripts/run_tests.sh to count, then the totals, and exits 1 if anything failed."""
import sys

results = []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def test(fn):
    try:
        fn()
        results.append(("PASS", fn.__name__))
    except Exception as e:
        print(f"  {fn.__name__}: {type(e).__name__}: {e}", file=sys.stderr)
        results.append(("FAIL", fn.__name__))
    return fn


def skip(what):
    results.append(("SKIP", what))


def report(title):
    for status, name in results:
        print(f"{status}: {name}")
    print(f"{title} tests: {sum(s == 'PASS' for s, _ in results)} passed, {sum(s == 'FAIL' for s, _ in results)} failed")
    sys.exit(1 if any(s == "FAIL" for s, _ in results) else 0)
